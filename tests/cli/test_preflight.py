"""`ftune run` refuses a launch that cannot work before torchrun starts a rank (and before torch is imported)."""

import subprocess
import sys

import pytest

from ftune import registry
from ftune.cli.main import main
from ftune.cli.preflight import check_distributed_config
from ftune.config.run_config import load_run_config

DPO_QLORA = ["run", "--nproc_per_node", "2", "lora_dpo_distributed", "--config", "smollm2/135M_lora_dpo"]


def test_qlora_with_a_distributed_recipe_that_does_not_run_it_is_refused_by_the_launcher(capsys):
    assert main([*DPO_QLORA, "peft.quantize_base=true"]) == 1
    err = capsys.readouterr().err
    assert "peft.quantize_base: true (set on the command line) is QLoRA, and lora_dpo_distributed" in err
    assert "run QLoRA DPO with lora_dpo_single_device" in err and "Traceback" not in err
    assert "or run QLoRA with lora_finetune_distributed" in err


def test_qlora_config_with_lora_finetune_distributed_passes_the_launcher_checks():
    recipe = registry.RECIPES["lora_finetune_distributed"].file
    check_distributed_config(load_run_config(recipe, ["--config", "smollm2/135M_qlora"]), recipe)


@pytest.mark.parametrize("value", ["0", "abc", "-1"])
def test_bad_nproc_per_node(value, capsys):
    assert main(["run", f"--nproc_per_node={value}", "dist_check"]) == 1
    err = capsys.readouterr().err
    assert f"--nproc_per_node {value!r}: the number of processes per node must be an integer >= 1" in err
    assert "Traceback" not in err


def test_refused_without_importing_torch():
    code = (
        "import sys, contextlib, io\n"
        "from ftune.cli.main import main\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        f"    rc = main({[*DPO_QLORA, 'peft.quantize_base=true']!r})\n"
        "assert rc == 1\n"
        "assert 'torch' not in sys.modules, 'the launcher imported torch before refusing'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=registry.recipes_dir().parent)
