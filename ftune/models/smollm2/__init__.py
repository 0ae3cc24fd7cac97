"""SmolLM2: component builder `smollm2`, model builders, converters, tokenizer builder."""

from ftune.models.smollm2._component_builders import smollm2
from ftune.models.smollm2._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.smollm2._model_builders import smollm2_1_7b, smollm2_135m, smollm2_360m
from ftune.models.smollm2._tokenizer import smollm2_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "hf_to_ftune",
    "smollm2",
    "smollm2_135m",
    "smollm2_1_7b",
    "smollm2_360m",
    "smollm2_tokenizer",
]
