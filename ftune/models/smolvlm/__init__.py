"""SmolVLM (Idefics3): component builder `smolvlm` and converters."""

from ftune.models.smolvlm._component_builders import smolvlm
from ftune.models.smolvlm._convert import CONVERTER, ftune_to_hf, hf_to_ftune

__all__ = ["CONVERTER", "ftune_to_hf", "hf_to_ftune", "smolvlm"]
