"""Llama 2: component builder `llama2`, model builders, converters, tokenizer builder."""

from ftune.models.llama2._component_builders import llama2
from ftune.models.llama2._convert import CONVERTER, ftune_to_hf, ftune_to_meta, hf_to_ftune, meta_to_ftune
from ftune.models.llama2._model_builders import llama2_7b, llama2_13b, llama2_70b
from ftune.models.llama2._tokenizer import llama2_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "ftune_to_meta",
    "hf_to_ftune",
    "llama2",
    "llama2_13b",
    "llama2_70b",
    "llama2_7b",
    "llama2_tokenizer",
    "meta_to_ftune",
]
