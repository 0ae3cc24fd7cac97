"""Which config a run reads: `--config`, else the shipped recipe's default, resolved in one place."""

import re
import shutil
from pathlib import Path

import pytest

from ftune import registry
from ftune.config import ConfigError
from ftune.config.run_config import config_to_read, default_config, load_run_config, shipped_recipe

ROOT = Path(__file__).resolve().parents[2]
# The declaration (registry/recipe.py) and two listings read the field: the docs' matrix (registry/docs.py)
# and `ftune ls`, which imports neither torch nor omegaconf (tests/cli/test_cli.py) and so nothing of
# ftune.config. Every run, --help, validate and cp ask run_config.default_config.
READERS = {
    "ftune/config/run_config.py",
    "ftune/registry/recipe.py",
    "ftune/registry/docs.py",
    "ftune/cli/ls.py",
}


def test_a_shipped_recipe_runs_its_registry_default_by_name_or_by_its_own_file():
    for recipe in registry.RECIPES.values():
        assert shipped_recipe(recipe.file) is recipe
        assert default_config(recipe.name) == default_config(recipe.file) == recipe.default_config
        assert config_to_read(recipe.file, None) == registry.config_path(recipe.default_config)


def test_a_copy_has_no_default_config_whatever_its_name(tmp_path):
    shipped = registry.RECIPES["lora_finetune_single_device"]
    copy = tmp_path / shipped.file.name
    shutil.copy(shipped.file, copy)
    assert shipped_recipe(copy) is None and default_config(copy) is None
    assert config_to_read(copy, None) is None and load_run_config(copy, ["batch_size=2"]) is None
    assert config_to_read(copy, "smollm2/135M_lora") == registry.config_path("smollm2/135M_lora")


def test_the_given_config_wins_and_a_bad_one_names_the_option():
    recipe = registry.RECIPES["lora_finetune_single_device"].file
    cfg = load_run_config(recipe, ["--config", "smollm2/135M_qlora", "batch_size=3", "--debug"])
    assert cfg.source == str(registry.config_path("smollm2/135M_qlora")) and cfg.node.batch_size == 3
    with pytest.raises(ConfigError, match=r"--config 'smollm2/135M_lorra': no such file .* Did you mean"):
        load_run_config(recipe, ["--config", "smollm2/135M_lorra"])
    with pytest.raises(ConfigError, match="unknown option '--confg'"):
        load_run_config(recipe, ["--confg", "x"])


def test_the_default_config_is_read_in_one_place():
    """No other module of the library reads `Recipe.default_config`: they ask run_config."""
    found = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "ftune").rglob("*.py")
        if re.search(r"\.default_config\b", p.read_text(encoding="utf-8"))
    }
    assert found <= READERS, (
        f"resolve the default with ftune.config.run_config.default_config: {found - READERS}"
    )
