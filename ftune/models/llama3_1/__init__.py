"""Llama 3.1: component builder `llama3_1`, model builders, converters, tokenizer builder."""

from ftune.models.llama3_1._component_builders import llama3_1
from ftune.models.llama3_1._convert import CONVERTER, ftune_to_hf, ftune_to_meta, hf_to_ftune, meta_to_ftune
from ftune.models.llama3_1._model_builders import llama3_1_8b, llama3_1_70b, llama3_1_405b
from ftune.models.llama3_1._tokenizer import llama3_1_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "ftune_to_meta",
    "hf_to_ftune",
    "llama3_1",
    "llama3_1_405b",
    "llama3_1_70b",
    "llama3_1_8b",
    "llama3_1_tokenizer",
    "meta_to_ftune",
]
