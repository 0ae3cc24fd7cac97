"""Commands that use or show a recipe's default config agree (ftune.config.run_config decides it)."""

import pytest

from ftune import registry
from ftune.cli.main import main


def test_ftune_run_of_a_copy_named_like_a_shipped_recipe_asks_for_its_config(tmp_path, capsys, monkeypatch):
    copy = tmp_path / "dist_check.py"
    copy.write_text(registry.RECIPES["dist_check"].file.read_text())
    monkeypatch.setattr("sys.argv", [])  # `ftune run` sets the recipe's command line
    monkeypatch.setattr("sys.path", __import__("sys").path[:])
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(copy)])
    assert exit_.value.code == 1
    assert "no config given: pass --config <name|path>" in capsys.readouterr().err


def test_validate_with_a_recipe_and_no_config_checks_the_config_run_reads(capsys):
    assert main(["validate", "--recipe", "dist_check"]) == 0
    assert "Config dist_check is valid against dist_check's settings." in capsys.readouterr().out
    assert main(["validate", "--recipe", "dist_check", "dist_timeout_s=0"]) == 1
    assert "dist_timeout_s: must be a finite number of seconds >= 1" in capsys.readouterr().err


def test_cp_of_a_recipe_says_which_config_the_copy_runs_with(tmp_path, capsys):
    assert main(["cp", "lora_finetune_distributed", str(tmp_path / "mine.py")]) == 0
    out = capsys.readouterr().out
    assert (
        f"Run it with: ftune run --nproc_per_node 2 {tmp_path / 'mine.py'} --config smollm2/135M_lora" in out
    )
    assert main(["cp", "smollm2/135M_lora", str(tmp_path / "mine.yaml")]) == 0
    assert "Run it with" not in capsys.readouterr().out  # a config: nothing to add


def test_ls_marks_the_default_config_of_each_recipe(capsys):
    assert main(["ls"]) == 0
    marked = [line for line in capsys.readouterr().out.splitlines() if "(default)" in line]
    assert len(marked) == len(registry.RECIPES)
    for line, recipe in zip(marked, registry.RECIPES.values()):
        assert line.split()[-2] == recipe.default_config, line
