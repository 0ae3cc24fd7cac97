"""SIGKILL at random moments, inside steps and inside saves, then resume: nothing lost, nothing wrong picked.

tests/recipes/kill_driver.py does the work in one process (every run is a fork of it, so a kill
and its restart cost no Python start-up): a LoRA run with dropout on, saving every step, is killed
at 13 points on one device and 8 at world size 2, resumed with resume_from_checkpoint=auto after
each, and every finished run is compared with a run never killed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

HERE = Path(__file__).resolve().parent
KILLS = {"single": 13, "world2": 8}


@pytest.fixture(scope="module")
def results(tiny_checkpoint, demo_dir, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("kill9")
    cmd = [sys.executable, str(HERE / "kill_driver.py"), str(workdir), str(tiny_checkpoint), str(demo_dir)]
    cmd += [str(KILLS["single"]), str(KILLS["world2"])]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[1])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env)
    out = workdir / "results.json"
    assert out.exists(), f"kill_driver failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(out.read_text())


@pytest.mark.parametrize("world", KILLS)
def test_killed_runs_resume_to_the_uninterrupted_weights(world, results):
    stats = results[world]
    assert results["problems"] == []
    assert stats["kills"] == KILLS[world]
    assert stats["mismatches"] == 0
    # Every killed run was resumed, and the last one finished (and was compared with the reference).
    assert stats["finished_runs"] >= 1 and stats["resumes"] >= stats["kills"] - stats["finished_runs"]
    # The kills landed inside steps and inside saves, and some left a folder without its marker behind.
    assert {"forward", "step"} & stats["by_kind"].keys(), stats["by_kind"]
    assert {"write", "rename", "unmark"} & stats["by_kind"].keys(), stats["by_kind"]
    assert stats["incomplete_folders_seen"] >= 1
