"""Mixtral: component builder `mixtral`, model builders, converters, tokenizer builder."""

from ftune.models.mixtral._component_builders import mixtral
from ftune.models.mixtral._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.mixtral._model_builders import mixtral_8x7b, mixtral_8x22b, mixtral_tiny
from ftune.models.mixtral._tokenizer import mixtral_tokenizer, mixtral_v3_tokenizer

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "hf_to_ftune",
    "mixtral",
    "mixtral_8x22b",
    "mixtral_8x7b",
    "mixtral_tiny",
    "mixtral_tokenizer",
    "mixtral_v3_tokenizer",
]
