"""SmolVLM (Idefics3) state-dict converters (pure: dict in, dict out).

transformers writes and reads `model.vision_model.*` (the SigLIP encoder), `model.connector.*`
(the projector), `model.text_model.*` and `lm_head.weight` (the llama text model); the text
model's keys convert with the llama-style (SmolLM2) converter.
"""

from ftune.models._image_text_keys import ImageTextKeys, image_text_converter
from ftune.models.smollm2._convert import CONVERTER as TEXT_CONVERTER

KEYS = ImageTextKeys(
    text=(("model.text_model.", "model."), ("lm_head.", "lm_head.")),
    vision=("model.vision_model.",),
    projector=("model.connector.",),
    projector_table={"modality_projection.proj.weight": "proj.weight"},
)
CONVERTER = image_text_converter("smolvlm", keys=KEYS, text=TEXT_CONVERTER)
hf_to_ftune = CONVERTER.hf_to_ftune
ftune_to_hf = CONVERTER.ftune_to_hf
