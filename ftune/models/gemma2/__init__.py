"""Gemma 2: component builder `gemma2`, model builders, converters, tokenizer builder."""

from ftune.models.gemma2._component_builders import gemma2
from ftune.models.gemma2._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.gemma2._model_builders import gemma2_2b, gemma2_9b, gemma2_27b
from ftune.models.gemma2._tokenizer import gemma2_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "gemma2",
    "gemma2_27b",
    "gemma2_2b",
    "gemma2_9b",
    "gemma2_tokenizer",
    "hf_to_ftune",
]
