"""Gemma (first generation): component builder `gemma`, model builders, converters, tokenizer builder."""

from ftune.models.gemma._component_builders import gemma
from ftune.models.gemma._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.gemma._model_builders import gemma_2b, gemma_7b
from ftune.models.gemma._tokenizer import gemma_tokenizer

__all__ = ["CONVERTER", "ftune_to_hf", "gemma", "gemma_2b", "gemma_7b", "gemma_tokenizer", "hf_to_ftune"]
