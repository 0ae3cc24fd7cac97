"""A training config without a model section: the checkpoint's config.json gives the family and sizes
(as transformers' AutoModel and Axolotl's base_model do), in every training recipe, through one
library path (`ftune.checkpointing.model_from_checkpoint`), and trains exactly as the explicit section."""

import pytest

from ftune import registry
from ftune.config import ConfigError, load_config
from ftune.config.model_source import check_model_source
from ftune.settings import LoRASettings


def losses(logs):
    return [row["loss"] for row in logs if "loss" in row]


def test_no_model_section_trains_as_the_explicit_one(run_recipe, tiny_checkpoint, tmp_path, capsys):
    config = "smollm2/135M_lora"
    explicit, _ = run_recipe("lora_finetune_single_device", config, "max_steps=2", output_dir=tmp_path / "a")
    assert "no model section" not in capsys.readouterr().err
    sized, _ = run_recipe(
        "lora_finetune_single_device", config, "max_steps=2", "~model", output_dir=tmp_path / "b"
    )
    assert losses(sized) == losses(explicit) and len(losses(sized)) == 2
    err = capsys.readouterr().err  # the start-up line names the family and sizes config.json gives
    line = next(line for line in err.splitlines() if line.startswith("ftune: running on cpu ("))
    assert line.endswith(
        f" in fp32; model: smollm2 (2 layers, width 64, vocabulary 320), as "
        f"{str(tiny_checkpoint / 'config.json')!r} says (no model section in the config)."
    )
    assert "ftune: model:" not in err  # said once, in the start-up line


def test_a_null_model_section_is_the_same_as_none(run_recipe, tmp_path):
    explicit, _ = run_recipe("full_finetune_single_device", "smollm2/135M_full", "max_steps=1")
    null, _ = run_recipe(
        "full_finetune_single_device", "smollm2/135M_full", "max_steps=1", "model=null",
        output_dir=tmp_path / "null",
    )  # fmt: skip
    assert losses(null) == losses(explicit)


TRAINING = list(registry.TRAINING)  # the distributed ones as a world of one


@pytest.mark.parametrize("recipe", TRAINING)
def test_every_training_recipe_runs_without_a_model_section(recipe, run_recipe, tmp_path):
    config = registry.RECIPES[recipe].default_config
    overrides = ["max_steps=1", "~model"]
    if recipe.startswith("knowledge_distillation"):
        overrides.append("~teacher_model")  # the teacher, too, from its own config.json
    logs, _ = run_recipe(recipe, config, *overrides)
    assert len(losses(logs)) == 1


def test_a_folder_without_config_json_is_refused_before_any_model_loads(tmp_path):
    folder = tmp_path / "weights"
    folder.mkdir()
    cfg = load_config("smollm2/135M_lora", ["~model", f"checkpointer.checkpoint_dir={folder}"])
    with pytest.raises(
        ConfigError,
        match=r"model: no model section \(set on the command line\), so the checkpoint's config\.json must "
        r"size the model, but '.*weights/config\.json' does not exist\. Add a model section \(e\.g\. "
        r"model\._component_=ftune\.models\.smollm2\.smollm2_135m\), or point checkpointer\.checkpoint_dir",
    ):
        check_model_source(cfg, LoRASettings)
