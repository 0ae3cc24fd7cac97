"""Qwen2.5: component builder `qwen2_5`, model builders, converters, tokenizer builder."""

from ftune.models.qwen2_5._component_builders import qwen2_5
from ftune.models.qwen2_5._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.qwen2_5._model_builders import (
    qwen2_5_0_5b,
    qwen2_5_1_5b,
    qwen2_5_3b,
    qwen2_5_7b,
    qwen2_5_14b,
    qwen2_5_32b,
    qwen2_5_72b,
)
from ftune.models.qwen2_5._tokenizer import qwen2_5_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "hf_to_ftune",
    "qwen2_5",
    "qwen2_5_0_5b",
    "qwen2_5_14b",
    "qwen2_5_1_5b",
    "qwen2_5_3b",
    "qwen2_5_32b",
    "qwen2_5_72b",
    "qwen2_5_7b",
    "qwen2_5_tokenizer",
]
