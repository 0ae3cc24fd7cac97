"""Gemma 3 image-text state-dict converters (pure: dict in, dict out).

Written in the layout transformers 5.24's save_pretrained writes (`language_model.model.*`,
`vision_tower.*`, `multi_modal_projector.*`); read from it, from Google's releases (the vision tower
under `vision_tower.vision_model.*`) and from transformers 5's module names (`model.language_model.*`,
`lm_head.*`, `model.vision_tower.*`, `model.multi_modal_projector.*`). The text decoder's keys
convert with the Gemma 3 text converter.
"""

from ftune.models._image_text_keys import conditional_generation_keys, image_text_converter
from ftune.models.gemma3._convert import CONVERTER as TEXT_CONVERTER

_PROJECTOR_TABLE = {
    "mm_input_projection_weight": "mm_input_projection_weight",
    "mm_soft_emb_norm.weight": "mm_soft_emb_norm.weight",
}
KEYS = conditional_generation_keys(_PROJECTOR_TABLE)
VISION_CONVERTER = image_text_converter("gemma3_vision", keys=KEYS, text=TEXT_CONVERTER)
