"""Gemma 3 (text): component builder `gemma3`, model builders, converters, tokenizer builder."""

from ftune.models.gemma3._component_builders import gemma3
from ftune.models.gemma3._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.gemma3._model_builders import gemma3_1b, gemma3_4b, gemma3_12b, gemma3_27b, gemma3_270m
from ftune.models.gemma3._tokenizer import gemma3_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "gemma3",
    "gemma3_12b",
    "gemma3_1b",
    "gemma3_270m",
    "gemma3_27b",
    "gemma3_4b",
    "gemma3_tokenizer",
    "hf_to_ftune",
]
