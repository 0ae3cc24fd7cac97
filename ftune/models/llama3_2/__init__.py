"""Llama 3.2: component builder `llama3_2`, model builders, converters, tokenizer builder."""

from ftune.models.llama3_2._component_builders import llama3_2
from ftune.models.llama3_2._convert import CONVERTER, ftune_to_hf, ftune_to_meta, hf_to_ftune, meta_to_ftune
from ftune.models.llama3_2._model_builders import llama3_2_1b, llama3_2_3b
from ftune.models.llama3_2._tokenizer import llama3_2_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "ftune_to_meta",
    "hf_to_ftune",
    "llama3_2",
    "llama3_2_1b",
    "llama3_2_3b",
    "llama3_2_tokenizer",
    "meta_to_ftune",
]
