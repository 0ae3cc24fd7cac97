"""The sweep of issue 44: for every family ftune builds, a tiny folder written by transformers
(`save_pretrained`, tests/assets/tiny_hf_family.py) trains one step of the family's LoRA config with
the model section left out (`~model`: config.json gives the family and sizes), and every shipped
config of the family validates against that folder, its model sized by the folder's config.json
(the shipped sizes are the real models', not the tiny folder's)."""

from __future__ import annotations

import pytest
from conftest import load_recipe, read_log
from tiny_hf_family import FAMILIES, make_family_folder

from ftune import registry
from ftune.cli.validate import validate
from ftune.config import load_config

pytestmark = pytest.mark.usefixtures("one_thread")

# The configs' hub data replaced by the demo task; a tiny, quiet, fp32 step.
TRAIN = [
    "dataset._component_=ftune.datasets.demo_dataset",
    "dataset.n_train=16",
    "dataset.n_heldout=4",
    "dataset_val=null",
    "tokenizer.max_seq_len=128",
    "batch_size=2",
    "max_steps=1",
    "progress_bar=false",
    "dtype=fp32",
    "device=cpu",
    "save_every_n_steps=null",
    "run_val_every_n_steps=null",
    "lr_scheduler.num_warmup_steps=0",
]


def family_configs(family: str) -> list[str]:
    return sorted(name for name in registry.CONFIGS if name.startswith(f"{family}/"))


def sized_by(folder, config: str) -> list[str]:
    """Point a config's model (and a KD config's teacher) at `folder`, sized by its config.json."""
    node = load_config(config).node
    overrides = ["~model"] if "model" in node else []  # an image-text config has none: config.json sizes it
    overrides += [f"checkpointer.checkpoint_dir={folder}", f"tokenizer.path={folder}"]
    if "teacher_model" in node:
        overrides += [
            "~teacher_model",
            f"teacher_checkpointer.checkpoint_dir={folder}",
            f"teacher_tokenizer.path={folder}",
        ]
    return overrides


@pytest.mark.parametrize("family", FAMILIES)
def test_a_transformers_folder_of_each_family_trains_and_validates_without_a_model_section(
    family, tmp_path, capsys
):
    folder = make_family_folder(family, tmp_path / "hf")
    configs = family_configs(family)
    lora = next(c for c in configs if c.endswith("_lora") and "_to_" not in c)
    out = tmp_path / "out"
    hub_data = ["~dataset.source"] if "source" in load_config(lora).node.dataset else []
    data = [*hub_data, f"dataset.data_dir={tmp_path / 'data'}"]
    cfg = load_config(lora, [*sized_by(folder, lora), *TRAIN, *data, f"output_dir={out}"])
    load_recipe("lora_finetune_single_device").main(cfg)
    assert len([row for row in read_log(out) if "loss" in row]) == 1
    line = next(
        line for line in capsys.readouterr().err.splitlines() if line.startswith("ftune: running on ")
    )
    named = "qwen2_5 (or qwen2: the same architecture)" if family == "qwen2" else family
    assert f" in fp32; model: {named} (" in line  # the start-up line
    assert line.endswith(f"), as {str(folder / 'config.json')!r} says (no model section in the config).")
    for config in configs:
        assert validate(config, sized_by(folder, config), files=False), config
