"""A run resumed from a step folder equals the uninterrupted run bit for bit, whatever the resuming process is like.

Issue 46: a SIGTERM-resumed run's third loss was 5.852235647348257 against the uninterrupted run's
5.852236821101262. The cause was the thread count: the interrupted run ran at 2 threads (a fresh
process), the comparison at 1 (the test process, after other code had set it), and a sum split over
another number of threads rounds its last bits differently. A step folder now records its thread
count and a resume continues at it (ftune.training.run.resume, docs/checkpoints.md). Each test here
resumes the uninterrupted run's mid-run step folder under one condition of the resuming process:
another thread count, a dtype-speed cache that the first run did not have, a busy machine.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ftune.training.run import dtype_advice as da

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import load_recipe, overrides_for  # noqa: E402
from run_logs import losses, read_log  # noqa: E402

from ftune.config import load_config  # noqa: E402

RECIPE, CONFIG = "full_finetune_single_device", "smollm2/135M_full"
STEPS, SAVED = 4, 2
EXTRA = ["~lr_scheduler", f"max_steps={STEPS}"]
THREADS = 1  # the uninterrupted run's thread count (one per pytest-xdist worker on two cores)


def _run(checkpoint: Path, demo: Path, out: Path, *extra: str) -> None:
    cfg = load_config(CONFIG, [*overrides_for(CONFIG, checkpoint, demo, out), *EXTRA, *extra])
    load_recipe(RECIPE).main(cfg)


@pytest.fixture(scope="module")
def straight(tiny_checkpoint, demo_dir, tmp_path_factory):
    """The uninterrupted run at THREADS threads, saving step_2 on the way (the folder the tests resume from),
    measuring fp32 against bf16 with no cache (and writing one: the machine is taken to be idle)."""
    root = tmp_path_factory.mktemp("straight")
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("OMP_NUM_THREADS", raising=False)
        mp.setenv("FTUNE_HOME", str(root / "home"))
        mp.setattr(da.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        torch.set_num_threads(THREADS)
        try:
            _run(tiny_checkpoint, demo_dir, root / "out", f"save_every_n_steps={SAVED}")
        finally:
            torch.set_num_threads(threads)
    assert (root / "home" / "cache" / da.CACHE_NAME).is_file()
    return root


@pytest.fixture
def resume(straight, tiny_checkpoint, demo_dir, tmp_path, monkeypatch):
    """Resume a copy of the straight run's step_2 to the end; returns (losses of steps 3-4, final weights)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("FTUNE_HOME", str(tmp_path / "home"))  # no cache unless a test puts one there
    threads = torch.get_num_threads()

    def run() -> tuple[list[float], dict[str, torch.Tensor]]:
        out = tmp_path / "out"
        shutil.copytree(straight / "out" / f"step_{SAVED}", out / f"step_{SAVED}")
        try:
            _run(tiny_checkpoint, demo_dir, out, "checkpointer.resume_from_checkpoint=auto")
        finally:
            torch.set_num_threads(threads)
        return losses(read_log(out)), load_file(str(out / f"step_{STEPS}" / "model.safetensors"))

    return run


def assert_as_uninterrupted(straight: Path, got: tuple[list[float], dict[str, torch.Tensor]]) -> None:
    resumed, weights = got
    assert resumed == losses(read_log(straight / "out"))[SAVED:]
    ref = load_file(str(straight / "out" / f"step_{STEPS}" / "model.safetensors"))
    assert ref.keys() == weights.keys() and all(torch.equal(ref[k], weights[k]) for k in ref)


def test_the_step_folder_records_its_thread_count(straight):
    state = torch.load(straight / "out" / f"step_{SAVED}" / "recipe_state.pt", weights_only=True)
    assert state["threads"] == THREADS


def test_a_process_at_another_thread_count_resumes_at_the_saved_one(straight, resume, caplog):
    torch.set_num_threads(THREADS + 1)  # what ran before in this process changed it (restored by `resume`)
    got = resume()
    assert_as_uninterrupted(straight, got)
    assert (
        f"resuming at {THREADS} thread(s), as the step folder was saved (this process was at {THREADS + 1})"
        in (caplog.text)
    )


def test_omp_num_threads_wins_over_the_saved_count_and_says_the_resume_is_not_exact(
    resume, monkeypatch, caplog
):
    monkeypatch.setenv("OMP_NUM_THREADS", str(THREADS + 1))
    seen = []
    monkeypatch.setattr(torch.optim.AdamW, "step", _spy(torch.optim.AdamW.step, seen))
    resume()
    assert seen and set(seen) == {THREADS + 1}
    assert (
        f"saved by a run at {THREADS} thread(s) and OMP_NUM_THREADS={THREADS + 1} sets {THREADS + 1}"
        in caplog.text
    )
    assert f"Set OMP_NUM_THREADS={THREADS} (or unset it) to resume bit for bit" in caplog.text


def _spy(step, seen: list):
    def spied(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return step(self, *args, **kwargs)

    return spied


def test_a_dtype_speed_cache_the_first_run_did_not_have_changes_nothing(straight, resume, monkeypatch):
    (Path(os.environ["FTUNE_HOME"]) / "cache").mkdir(parents=True)
    shutil.copy(straight / "home" / "cache" / da.CACHE_NAME, Path(os.environ["FTUNE_HOME"]) / "cache")
    measured = []
    monkeypatch.setattr(da, "measure_speed", lambda *a, **k: measured.append(1))
    got = resume()
    assert measured == []  # the cache answered: no product was timed before the resumed steps
    assert_as_uninterrupted(straight, got)


def test_a_poisoned_dtype_speed_cache_changes_nothing(straight, resume):
    cache = Path(os.environ["FTUNE_HOME"]) / "cache"
    cache.mkdir(parents=True)
    entries = json.loads((straight / "home" / "cache" / da.CACHE_NAME).read_text())
    (cache / da.CACHE_NAME).write_text(json.dumps({k: {"fp32_s": 0, "bf16_s": "x"} for k in entries}))
    assert_as_uninterrupted(straight, resume())


def test_a_busy_machine_changes_nothing(straight, resume):
    """Another process holds a core all through the resumed run (and its dtype-speed measurement)."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        got = resume()
    finally:
        spin.kill()
        spin.wait()
    assert_as_uninterrupted(straight, got)
