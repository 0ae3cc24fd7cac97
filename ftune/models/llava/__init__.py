"""Compose your own image-text model, LLaVA-style: component builder `llava`, converters."""

from ftune.models.llava._component_builders import llava
from ftune.models.llava._convert import llava_converter, siglip_hf_to_ftune

__all__ = ["llava", "llava_converter", "siglip_hf_to_ftune"]
