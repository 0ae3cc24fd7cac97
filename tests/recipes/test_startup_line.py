"""A training run says first what it runs on, and warns when its dtype is slow on this CPU."""

import torch

from ftune.runtime import hardware


def test_a_run_announces_device_and_dtype_and_warns_on_slow_bf16(run_recipe, tmp_path, capsys):
    run_recipe("full_finetune_single_device", "smollm2/135M_full", "max_steps=1", "dtype=bf16")
    err = capsys.readouterr().err
    cpu = torch.device("cpu")
    assert f"ftune: {hardware.startup_message(cpu, torch.bfloat16)}" in err
    if hardware.native_bf16(cpu) is False:  # this CPU lacks native bf16: the warning names the slowdown
        assert f"ftune: warning: {hardware.dtype_warning(cpu, torch.bfloat16)}" in err
    else:
        assert "warning" not in err
    run_recipe(
        "full_finetune_single_device", "smollm2/135M_full", "max_steps=1", output_dir=tmp_path / "fp32"
    )
    err = capsys.readouterr().err
    assert "in fp32" in err and "warning" not in err
