"""LLaVA-style state-dict converters (pure: dict in, dict out), for any text family.

Written as transformers 5.24's save_pretrained writes LlavaForConditionalGeneration
(`language_model.model.*`, `language_model.lm_head.*`, `vision_tower.*`, `multi_modal_projector.*`);
read from that, the original LLaVA releases (the tower under `vision_tower.vision_model.*`) and
transformers 5's module names (`model.language_model.*`, `lm_head.*`, `model.vision_tower.*`,
`model.multi_modal_projector.*`). The text model's keys convert with its own family's converter.
A SigLIP checkpoint of its own (SiglipModel or SiglipVisionModel) gives the encoder's weights
through `siglip_hf_to_ftune`.
"""

from ftune.models._converter import Converter
from ftune.models._image_text_keys import (
    SIGLIP_TABLE,
    conditional_generation_keys,
    image_text_converter,
    rename_in_part,
)
from ftune.models._key_rename import StateDict

_PROJECTOR_TABLE = {f"linear_{i}.{kind}": f"linear_{i}.{kind}" for i in (1, 2) for kind in ("weight", "bias")}
KEYS = conditional_generation_keys(_PROJECTOR_TABLE)


def llava_converter(text: Converter) -> Converter:
    """The converter of a `llava` model whose decoder's family converts with `text` (e.g.
    `ftune.models.CONVERTERS["smollm2"]`)."""
    return image_text_converter(f"llava_{text.family}", keys=KEYS, text=text)


# A SiglipModel's text tower, its contrastive scale and bias, and the pooling head: no use to a VLM.
_SIGLIP_UNUSED = ("text_model.", "logit_scale", "logit_bias", "vision_model.head.", "head.")


def siglip_hf_to_ftune(sd: StateDict) -> StateDict:
    """A SigLIP checkpoint's vision tower (transformers' SiglipModel or SiglipVisionModel keys, with or
    without `vision_model.`) -> `ImageTextModel` keys (`vision_encoder.*`), to start a composed model
    from a pretrained encoder (load with `strict=False`, then check the missing keys are the
    decoder's and projector's). The text tower, logit scale/bias and pooling head are left out.

    Raises:
        KeyError: a key of no part of a SigLIP checkpoint, naming it and the known patterns.
    """
    out: StateDict = {}
    for key, value in sd.items():
        if not key.startswith(_SIGLIP_UNUSED):
            inner = key.removeprefix("vision_model.")
            new = rename_in_part(key, inner, SIGLIP_TABLE, family="siglip", part="vision tower", source="HF")
            out["vision_encoder." + new] = value
    return out
