"""Qwen3 (dense): component builder `qwen3`, model builders, converters, tokenizer builder."""

from ftune.models.qwen3._component_builders import qwen3
from ftune.models.qwen3._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.qwen3._model_builders import (
    qwen3_0_6b,
    qwen3_1_7b,
    qwen3_4b,
    qwen3_8b,
    qwen3_14b,
    qwen3_32b,
)
from ftune.models.qwen3._tokenizer import qwen3_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "hf_to_ftune",
    "qwen3",
    "qwen3_0_6b",
    "qwen3_14b",
    "qwen3_1_7b",
    "qwen3_32b",
    "qwen3_4b",
    "qwen3_8b",
    "qwen3_tokenizer",
]
