"""SIGTERM and Ctrl-C stop a training run at a step boundary with a complete step folder and a resume hint."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ftune.checkpointing.atomic import is_complete

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "assets"))
from tiny_checkpoint import tiny_overrides  # noqa: E402


def start(tiny_checkpoint, demo_dir, out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ftune.cli.main", "run", "full_finetune_single_device", "--config"]
    cmd += ["smollm2/135M_full", *tiny_overrides(tiny_checkpoint, demo_dir, out), *extra]
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1])}
    env.pop("FTUNE_DEBUG", None)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_steps(out: Path, proc: subprocess.Popen, n: int = 2, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        logs = list((out / "logs").glob("*.jsonl")) if (out / "logs").is_dir() else []
        if sum(len(f.read_text().splitlines()) for f in logs) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"the run logged fewer than {n} steps: {proc.poll()}")


CONSTANT_LR = "~lr_scheduler"  # the resumed run's max_steps differs: keep the LR independent of it


# SIGINT takes the same handler (exit 128 + 2): tests/training/test_stop_on_signal.py checks it in-process,
# so one signal runs end to end here.
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143)])
def test_a_signal_saves_the_step_and_exits(signum, code, tiny_checkpoint, demo_dir, tmp_path, run_recipe):
    out = tmp_path / "run"
    proc = start(tiny_checkpoint, demo_dir, out, "max_steps=400", CONSTANT_LR)
    wait_for_steps(out, proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert "Traceback" not in err, err
    steps = sorted(int(p.name.removeprefix("step_")) for p in out.glob("step_*"))
    assert len(steps) == 1 and 2 <= steps[0] < 400, steps
    stopped = steps[0]
    assert is_complete(out / f"step_{stopped}")
    assert f"after step {stopped}; saved {out}/step_{stopped}." in err
    assert "checkpointer.resume_from_checkpoint=auto" in err

    # The saved step resumes exactly: two more steps land where an uninterrupted run does.
    both, _ = run_recipe(
        "full_finetune_single_device", "smollm2/135M_full", f"max_steps={stopped + 2}", CONSTANT_LR,
        "checkpointer.resume_from_checkpoint=auto", output_dir=out,
    )  # fmt: skip
    straight, ref = run_recipe(
        "full_finetune_single_device", "smollm2/135M_full", f"max_steps={stopped + 2}", CONSTANT_LR,
        output_dir=tmp_path / "ref",
    )  # fmt: skip
    # The interrupted run's log rows, then the resumed run's: those of one uninterrupted run.
    assert [r["loss"] for r in both] == [r["loss"] for r in straight]
    a = load_file(str(out / f"step_{stopped + 2}" / "model.safetensors"))
    b = load_file(str(ref / f"step_{stopped + 2}" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_second_ctrl_c_stops_at_once(tiny_checkpoint, demo_dir, tmp_path):
    out = tmp_path / "run"
    proc = start(tiny_checkpoint, demo_dir, out, "max_steps=400")
    wait_for_steps(out, proc)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    # Whatever was cut short has no completion marker, so resume cannot pick it.
    assert all(is_complete(p) or not (p / ".complete").exists() for p in out.glob("step_*"))
