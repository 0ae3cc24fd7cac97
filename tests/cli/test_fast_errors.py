"""Config mistakes are reported by `ftune run` and `ftune validate` before torch is imported.

(Both stop at the first group of problems they can find without torch: keys, types, ranges,
sections. A config without such problems goes on to the component signature checks, which import
the components, and so torch.)
"""

import subprocess
import sys

import pytest

from ftune import registry
from ftune.cli.fast_check import fast_check, settings_path
from ftune.config import ConfigError
from ftune.config.run_config import load_run_config

SCRIPT = """
import sys, contextlib, io
from ftune.cli.main import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    rc = main({argv!r})
assert rc == 1, rc
assert {expected!r} in err.getvalue(), err.getvalue()
assert 'torch' not in sys.modules, 'torch was imported before the error'
assert not [m for m in sys.modules if m.startswith('ftune.training')], 'a placeholder package was left'
"""

CASES = [
    (
        ["run", "lora_finetune_single_device", "batchsize=3"],
        "batchsize: unknown key (set on the command line)",
    ),
    (["run", "full_finetune_single_device", "epochs=-1"], "epochs: must be >= 1, got -1"),
    (["run", "lora_finetune_single_device", "batch_size=many"], "batch_size: expected int, got 'many'"),
    (
        ["run", "--nproc_per_node", "2", "qat_distributed", "save_every_n_steps=0"],
        "save_every_n_steps: must be",
    ),
    (["run", "generate", "max_new_tokens=lots"], "max_new_tokens: expected int"),
    (["run", "lora_finetune_single_device", "--config", "nope.yaml"], "no such file and no shipped config"),
    (["validate", "smollm2/135M_lora", "batchsize=3"], "batchsize: unknown key (set on the command line)"),
    (
        ["validate", "--config", "smollm2/135M_full", "dist_timeout_s=0"],
        "dist_timeout_s: must be a finite number of seconds >= 1",
    ),
    (
        ["validate", "smollm2/135M_lora", "optimizer_in_backward=true", "grad_accum_steps=2"],
        "optimizer_in_backward needs grad_accum_steps=1",
    ),
]


@pytest.mark.parametrize(("argv", "expected"), CASES, ids=[" ".join(a[:3]) for a, _ in CASES])
def test_error_before_torch_is_imported(argv, expected):
    code = SCRIPT.format(argv=argv, expected=expected)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=registry.recipes_dir().parent)


def test_the_fast_check_uses_the_class_the_recipe_runs_with():
    """No stand-in module: the class checked before torch is the one the recipe reads its settings into."""
    code = (
        "import sys\n"
        "from ftune import registry\n"
        "from ftune.cli.fast_check import fast_check, settings_class\n"
        "from ftune.config.run_config import load_run_config\n"
        "file = registry.RECIPES['qat_distributed'].file\n"
        "cfg = load_run_config(file, [])\n"
        "fast_check(cfg, file)\n"
        "assert cfg.values_checked\n"
        "assert 'torch' not in sys.modules\n"
        "checked = settings_class('ftune.training.QATSettings')\n"
        "import ftune.training\n"
        "assert checked is ftune.training.QATSettings\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=registry.recipes_dir().parent)


def test_settings_read_from_the_recipe_text_for_every_shipped_recipe():
    for recipe in registry.RECIPES.values():
        assert settings_path(recipe.file), recipe.name
        cfg = load_run_config(recipe.file, [])
        fast_check(cfg, recipe.file)  # the default config passes
        assert cfg.values_checked, recipe.name


def test_a_recipe_with_its_own_settings_class_has_no_fast_check(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text(
        "from dataclasses import dataclass\nfrom ftune import config, training\n\n"
        "@dataclass\nclass Mine(training.LoRASettings):\n    x: int = 1\n\nSETTINGS = Mine\n"
    )
    cfg = load_run_config(mine, ["--config", "smollm2/135M_lora", "x=2"])
    fast_check(cfg, mine)
    assert not cfg.values_checked
    with pytest.raises(ConfigError, match="no such file and no shipped config"):
        load_run_config(mine, ["--config", "nope.yaml"])  # the config file itself is still checked
