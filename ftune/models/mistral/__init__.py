"""Mistral: component builder `mistral`, model builders, converters, tokenizer builder."""

from ftune.models.mistral._component_builders import mistral
from ftune.models.mistral._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.mistral._model_builders import mistral_7b
from ftune.models.mistral._tokenizer import mistral_tokenizer

__all__ = ["CONVERTER", "ftune_to_hf", "hf_to_ftune", "mistral", "mistral_7b", "mistral_tokenizer"]
