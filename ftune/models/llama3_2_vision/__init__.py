"""Llama 3.2 Vision: component builder `llama3_2_vision`, model builders (11B, 90B, a tiny one),
converters (HF both ways, torchtune's own keys both ways), tokenizer builder."""

from ftune.models.llama3_2_vision._component_builders import llama3_2_vision
from ftune.models.llama3_2_vision._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.llama3_2_vision._model_builders import (
    llama3_2_vision_11b,
    llama3_2_vision_90b,
    llama3_2_vision_tiny,
)
from ftune.models.llama3_2_vision._tokenizer import llama3_2_vision_tokenizer
from ftune.models.llama3_2_vision._torchtune_keys import ftune_to_torchtune, torchtune_to_ftune

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "ftune_to_torchtune",
    "hf_to_ftune",
    "llama3_2_vision",
    "llama3_2_vision_11b",
    "llama3_2_vision_90b",
    "llama3_2_vision_tiny",
    "llama3_2_vision_tokenizer",
    "torchtune_to_ftune",
]
