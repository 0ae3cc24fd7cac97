"""Qwen3-MoE: component builder `qwen3_moe`, model builders, converters, tokenizer builder."""

from ftune.models.qwen3_moe._component_builders import qwen3_moe
from ftune.models.qwen3_moe._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.qwen3_moe._model_builders import qwen3_moe_30b_a3b, qwen3_moe_235b_a22b, qwen3_moe_tiny
from ftune.models.qwen3_moe._tokenizer import qwen3_moe_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "hf_to_ftune",
    "qwen3_moe",
    "qwen3_moe_235b_a22b",
    "qwen3_moe_30b_a3b",
    "qwen3_moe_tiny",
    "qwen3_moe_tokenizer",
]
