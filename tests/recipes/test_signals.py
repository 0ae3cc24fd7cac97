"""SIGTERM and Ctrl-C stop a training run at a step boundary with a complete step folder and a resume hint."""

import contextlib
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
from ftune.training.run import dtype_advice as da

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "assets"))
from tiny_checkpoint import tiny_overrides  # noqa: E402


def start(tiny_checkpoint, demo_dir, out: Path, *extra: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ftune.cli.main", "run", "full_finetune_single_device", "--config"]
    cmd += ["smollm2/135M_full", *tiny_overrides(tiny_checkpoint, demo_dir, out), *extra]
    env = {**os.environ, "PYTHONPATH": str(HERE.parents[1]), **(env or {})}
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


@contextlib.contextmanager
def resuming_process(condition: str, monkeypatch, home: Path):
    """The in-process resume's surroundings. "as_saved": the interrupted run's thread count. "elsewhere"
    (issue 46): another thread count (the saved one is taken back), a dtype-speed cache the
    interrupted run did not have, and another process holding a core all along."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("FTUNE_HOME", str(home))
    if condition == "as_saved":
        torch.set_num_threads(THREADS)
        yield
        return
    torch.set_num_threads(THREADS + 1)
    assert (home / "cache" / da.CACHE_NAME).is_file()  # written by the uninterrupted run
    # The cache answers (the advice is measured after the saved thread count is taken back): nothing is timed.
    monkeypatch.setattr(da, "measure_speed", None)
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spin.kill()
        spin.wait()


CONSTANT_LR = "~lr_scheduler"  # the resumed run's max_steps differs: keep the LR independent of it
THREADS = 1  # the interrupted and the uninterrupted runs' thread count


# SIGINT takes the same handler (exit 128 + 2): tests/training/test_stop_on_signal.py checks it in-process,
# so one signal runs end to end here.
@pytest.mark.parametrize("condition", ["as_saved", "elsewhere"])
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143)])
def test_a_signal_saves_the_step_and_exits(
    signum, code, condition, tiny_checkpoint, demo_dir, tmp_path, run_recipe, monkeypatch
):
    out = tmp_path / "run"
    pinned = {"OMP_NUM_THREADS": str(THREADS), "FTUNE_HOME": str(tmp_path / "home_interrupted")}
    proc = start(tiny_checkpoint, demo_dir, out, "max_steps=400", CONSTANT_LR, env=pinned)
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
    threads, home = torch.get_num_threads(), tmp_path / "home"
    try:
        with monkeypatch.context() as mp:  # the uninterrupted run, at the interrupted run's thread count
            mp.setenv("FTUNE_HOME", str(home))
            mp.setattr(da.os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # it writes a dtype-speed cache
            torch.set_num_threads(THREADS)
            straight, ref = run_recipe(
                "full_finetune_single_device", "smollm2/135M_full", f"max_steps={stopped + 2}", CONSTANT_LR,
                output_dir=tmp_path / "ref",
            )  # fmt: skip
        with resuming_process(condition, monkeypatch, home):
            both, _ = run_recipe(
                "full_finetune_single_device", "smollm2/135M_full", f"max_steps={stopped + 2}", CONSTANT_LR,
                "checkpointer.resume_from_checkpoint=auto", output_dir=out,
            )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
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
