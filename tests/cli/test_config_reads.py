"""`ftune run` reads a run's YAML once: once in this process for a one-device run; for a launch, once in
the launcher before torchrun starts a rank, and once in each rank, which skips the launcher's checks.

The recipe below counts the parses of the one loader (`OmegaConf.load` in ftune.config.loading) in its
own process, so the ranks of a real launch count theirs; it imports neither torch nor a process group,
so a launch at world size 2 costs the launcher's torchrun import and two small interpreters.
"""

import json
import os
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ftune.cli.main import main
from ftune.config import load_config
from ftune.config.launch_checked import CHECKED_ENV, digest, launcher_checked
from ftune.settings import DistCheckSettings

RECIPE = """
import json, os, sys
from omegaconf import OmegaConf
from ftune import config
from ftune.settings import DistCheckSettings

SETTINGS = DistCheckSettings
PARSED = []
_load = OmegaConf.load
OmegaConf.load = lambda f: (PARSED.append(str(f)), _load(f))[1]


def main(cfg):
    report = {{"parsed": PARSED, "values_checked": SETTINGS in cfg.values_checked}}
    with open(os.path.join({out!r}, "rank" + os.environ.get("RANK", "-") + ".json"), "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    config.run(main)
"""


@pytest.fixture
def recipe(tmp_path, monkeypatch):
    """A recipe file that reports its parses; parses in this process are counted in `parsed`."""
    path = tmp_path / "my_count.py"
    path.write_text(RECIPE.format(out=str(tmp_path)))
    parsed: list[str] = []
    load = OmegaConf.load
    monkeypatch.setattr(OmegaConf, "load", lambda f: (parsed.append(str(f)), load(f))[1])
    monkeypatch.setattr(sys, "argv", sys.argv[:])  # `ftune run` sets the recipe's command line
    monkeypatch.setattr(sys, "path", sys.path[:])
    return path, parsed


def test_a_one_device_run_parses_its_yaml_once(recipe, tmp_path):
    path, parsed = recipe
    assert main(["run", str(path), "--config", "dist_check", "dist_timeout_s=60"]) == 0
    assert [Path(p).name for p in parsed] == ["dist_check.yaml"]  # checked, then handed to main
    report = json.loads((tmp_path / "rank-.json").read_text())
    assert report["parsed"] == []  # none after the recipe started: main got the config `ftune run` checked
    assert report["values_checked"]  # main's cfg.settings checks only component signatures


@pytest.mark.distributed
def test_a_launch_at_world_size_2_parses_once_in_the_launcher_and_once_in_each_rank(recipe, tmp_path):
    path, parsed = recipe
    argv = [
        "run",
        "--standalone",
        "--monitor-interval",
        "0.1",
        "--nproc_per_node",
        "2",
        str(path),
        "--config",
        "dist_check",
    ]
    assert main([*argv, "dist_timeout_s=60"]) == 0
    assert [Path(p).name for p in parsed] == ["dist_check.yaml"]  # the launcher, before torchrun
    assert CHECKED_ENV not in os.environ  # the caller gets its environment back
    for rank in (0, 1):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert [Path(p).name for p in report["parsed"]] == ["dist_check.yaml"], rank
        assert report["values_checked"], rank  # the launcher's key/type/range checks are not run again


def test_a_rank_checks_everything_unless_the_launcher_checked_this_very_config(monkeypatch):
    cfg = load_config("dist_check", ["dist_timeout_s=60"])
    monkeypatch.delenv(CHECKED_ENV, raising=False)
    assert not launcher_checked(cfg, DistCheckSettings)  # no launcher: a script run checks it all
    monkeypatch.setenv(CHECKED_ENV, digest(cfg, DistCheckSettings))
    assert launcher_checked(cfg, DistCheckSettings)
    assert not launcher_checked(load_config("dist_check", ["dist_timeout_s=61"]), DistCheckSettings)
    assert not launcher_checked(cfg, type("Other", (DistCheckSettings,), {}))
    monkeypatch.setenv(CHECKED_ENV, "1")  # set by hand: not a digest of this config
    assert not launcher_checked(cfg, DistCheckSettings)
