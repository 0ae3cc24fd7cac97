"""Every published model builder has exactly the parameter count of the published checkpoint."""

import pytest
import torch

import ftune.models as models

# Parameter counts of the published HF checkpoints (safetensors totals; tied embeddings counted once).
PUBLISHED = {
    "llama2_7b": 6_738_415_616,
    "llama2_13b": 13_015_864_320,
    "llama2_70b": 68_976_648_192,
    "llama3_8b": 8_030_261_248,
    "llama3_70b": 70_553_706_496,
    "llama3_1_8b": 8_030_261_248,
    "llama3_1_70b": 70_553_706_496,
    "llama3_1_405b": 405_853_388_800,
    "llama3_2_1b": 1_235_814_400,
    "llama3_2_3b": 3_212_749_824,
    "qwen2_5_0_5b": 494_032_768,
    "qwen2_5_1_5b": 1_543_714_304,
    "qwen2_5_3b": 3_085_938_688,
    "qwen2_5_7b": 7_615_616_512,
    "qwen2_5_14b": 14_770_033_664,
    "qwen2_5_32b": 32_763_876_352,
    "qwen2_5_72b": 72_706_203_648,
    "mistral_7b": 7_241_732_096,
    "smollm2_135m": 134_515_008,
    "smollm2_360m": 361_821_120,
    "smollm2_1_7b": 1_711_376_384,
}


def _model_builders() -> list[str]:
    names = []
    for family in models.FAMILIES:
        module = getattr(models, family)
        names += [n for n in module.__all__ if n.startswith(family + "_") and n[len(family) + 1].isdigit()]
    return names


def test_every_model_builder_is_checked() -> None:
    assert sorted(_model_builders()) == sorted(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_published(name: str) -> None:
    family = next(f for f in sorted(models.FAMILIES, key=len, reverse=True) if name.startswith(f + "_"))
    with torch.device("meta"):
        model = getattr(getattr(models, family), name)()
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED[name]
