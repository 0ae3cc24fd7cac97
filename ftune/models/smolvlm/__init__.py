"""SmolVLM (Idefics3): component builder `smolvlm`, the tiny builder `smolvlm_tiny`, converters."""

from ftune.models.smolvlm._component_builders import smolvlm
from ftune.models.smolvlm._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.smolvlm._model_builders import smolvlm_tiny

__all__ = ["CONVERTER", "ftune_to_hf", "hf_to_ftune", "smolvlm", "smolvlm_tiny"]
