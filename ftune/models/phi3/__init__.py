"""Phi-3: component builder `phi3`, model builders, converters (fused qkv / gate_up), tokenizer builder."""

from ftune.models.phi3._component_builders import phi3
from ftune.models.phi3._convert import CONVERTER
from ftune.models.phi3._model_builders import phi3_3_8b, phi3_14b
from ftune.models.phi3._tokenizer import phi3_tokenizer

hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf

__all__ = [
    "CONVERTER",
    "ftune_to_hf",
    "hf_to_ftune",
    "phi3",
    "phi3_14b",
    "phi3_3_8b",
    "phi3_tokenizer",
]
