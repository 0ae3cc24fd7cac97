"""Gemma 3: the text component builder `gemma3`, the image-text one `gemma3_image_text`, model builders,
converters (text and image-text), tokenizer builder."""

from ftune.models.gemma3._component_builders import gemma3
from ftune.models.gemma3._convert import CONVERTER, ftune_to_hf, hf_to_ftune
from ftune.models.gemma3._model_builders import gemma3_1b, gemma3_4b, gemma3_12b, gemma3_27b, gemma3_270m
from ftune.models.gemma3._tokenizer import gemma3_tokenizer
from ftune.models.gemma3._vision import (
    gemma3_image_text,
    gemma3_vision_4b,
    gemma3_vision_12b,
    gemma3_vision_27b,
)
from ftune.models.gemma3._vision_convert import VISION_CONVERTER

__all__ = [
    "CONVERTER",
    "VISION_CONVERTER",
    "ftune_to_hf",
    "gemma3",
    "gemma3_12b",
    "gemma3_1b",
    "gemma3_270m",
    "gemma3_27b",
    "gemma3_4b",
    "gemma3_image_text",
    "gemma3_tokenizer",
    "gemma3_vision_12b",
    "gemma3_vision_27b",
    "gemma3_vision_4b",
    "hf_to_ftune",
]
