"""`ftune run` refuses a launch that cannot work before torchrun starts a rank (and before torch is imported)."""

import subprocess
import sys

import pytest

from ftune import registry
from ftune.cli.main import main


def test_qlora_with_a_distributed_recipe_is_refused_by_the_launcher(capsys):
    assert (
        main(["run", "--nproc_per_node", "2", "lora_finetune_distributed", "--config", "smollm2/135M_qlora"])
        == 1
    )
    err = capsys.readouterr().err
    assert "peft.quantize_base: true (in " in err and "135M_qlora.yaml) is QLoRA" in err
    assert "Run QLoRA on one device" in err and "Traceback" not in err
    # set on the command line: the message says so
    assert main(["run", "--nproc_per_node", "2", "lora_finetune_distributed", "peft.quantize_base=true"]) == 1
    assert "peft.quantize_base: true (set on the command line)" in capsys.readouterr().err


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
        "    rc = main(['run', '--nproc_per_node', '2', 'lora_finetune_distributed', '--config', "
        "'smollm2/135M_qlora'])\n"
        "assert rc == 1\n"
        "assert 'torch' not in sys.modules, 'the launcher imported torch before refusing'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=registry.recipes_dir().parent)
