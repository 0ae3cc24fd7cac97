"""activation_offloading is a recipe setting: it validates, and a CPU run refuses it before training."""

import pytest

from ftune.cli.validate import validate


def test_setting_validates_in_every_fine_tuning_config_method():
    for config in ("smollm2/135M_full", "smollm2/135M_lora", "smollm2/135M_qat_full"):
        validate(config, ["activation_offloading=true", "activation_checkpointing=true"])


@pytest.mark.parametrize("recipe, config", [("full_finetune_single_device", "smollm2/135M_full")])
def test_cpu_run_refuses_it(recipe, config, run_recipe, tmp_path):
    with pytest.raises(ValueError, match="nothing to offload to"):
        run_recipe(recipe, config, "max_steps=1", "activation_offloading=true", output_dir=tmp_path / "o")
    assert not (tmp_path / "o" / "step_1").exists()
