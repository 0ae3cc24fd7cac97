"""Llama 3: component builder `llama3`, model builders, converters, tokenizer builder."""

from ftune.models.llama3._component_builders import llama3
from ftune.models.llama3._convert import CONVERTER, ftune_to_hf, ftune_to_meta, hf_to_ftune, meta_to_ftune
from ftune.models.llama3._model_builders import llama3_8b, llama3_70b
from ftune.models.llama3._tokenizer import llama3_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "ftune_to_meta",
    "hf_to_ftune",
    "llama3",
    "llama3_70b",
    "llama3_8b",
    "llama3_tokenizer",
    "meta_to_ftune",
]
