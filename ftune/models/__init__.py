"""Model families, their converters, and models built from a Hugging Face config.json.

    ftune.models.CONVERTERS["llama3"].hf_to_ftune(sd)      # pure key/layout conversion
    family, model = ftune.models.model_from_hf_config(json.load(open("config.json")))

Image-text models (Gemma 3 with its vision path, SmolVLM, LLaVA-style compositions, Llama 3.2 Vision)
are `ftune.modules.vision.ImageTextModel`s: `image_text_model_from_hf_config` builds one from its
config.json, `image_text_converter(family, text_family)` converts its weights.

A checkpoint folder to a loaded model is `ftune.checkpointing.load_hf(folder)` (checkpointing sits
above models in the layer order).

Importing this package imports torch and the model code only (never `transformers`).
"""

from ftune.models import (
    code_llama2,
    gemma,
    gemma2,
    gemma3,
    llama2,
    llama3,
    llama3_1,
    llama3_2,
    llama3_2_vision,
    llava,
    mistral,
    mixtral,
    phi3,
    phi4,
    qwen2,
    qwen2_5,
    qwen3,
    qwen3_moe,
    smollm2,
    smolvlm,
)
from ftune.models._converter import Converter
from ftune.models._hf_config import (
    COMPONENT_BUILDERS,
    IMAGE_TEXT,
    SUPPORTED_ARCHITECTURES,
    builder_kwargs,
    family_from_hf_config,
    image_text_kind,
    model_from_hf_config,
    text_model_config,
)
from ftune.models._image_text_config import (
    image_text_family,
    image_text_model_from_hf_config,
    image_text_text_config,
    is_image_text_model_config,
)

FAMILIES: tuple[str, ...] = (
    "llama2",
    "llama3",
    "llama3_1",
    "llama3_2",
    "qwen2_5",
    "mistral",
    "smollm2",
    "qwen3",
    "gemma3",
    "qwen3_moe",
    "qwen2",
    "phi3",
    "phi4",
    "gemma",
    "code_llama2",
    "gemma2",
    "mixtral",
)

CONVERTERS: dict[str, Converter] = {
    "llama2": llama2.CONVERTER,
    "llama3": llama3.CONVERTER,
    "llama3_1": llama3_1.CONVERTER,
    "llama3_2": llama3_2.CONVERTER,
    "qwen2_5": qwen2_5.CONVERTER,
    "mistral": mistral.CONVERTER,
    "smollm2": smollm2.CONVERTER,
    "qwen3": qwen3.CONVERTER,
    "gemma3": gemma3.CONVERTER,
    "qwen3_moe": qwen3_moe.CONVERTER,
    "qwen2": qwen2.CONVERTER,
    "phi3": phi3.CONVERTER,
    "phi4": phi4.CONVERTER,
    "gemma": gemma.CONVERTER,
    "code_llama2": code_llama2.CONVERTER,
    "gemma2": gemma2.CONVERTER,
    "mixtral": mixtral.CONVERTER,
}

# Families whose HF config.json cannot be told from another family's (same architecture class, same
# fields): a folder of one loads as the other, with the same modules and keys, unless the
# checkpointer is given model_type. Qwen2 and Qwen2.5 are both Qwen2ForCausalLM.
SAME_ARCHITECTURE: dict[str, str] = {"qwen2": "qwen2_5"}

# Image-text families (`ftune.modules.vision.ImageTextModel`): their converters, by family. A
# composed (LLaVA-style) model's converter depends on its decoder's family: `image_text_converter`.
IMAGE_TEXT_CONVERTERS: dict[str, Converter] = {
    "gemma3_vision": gemma3.VISION_CONVERTER,
    "smolvlm": smolvlm.CONVERTER,
    "llama3_2_vision": llama3_2_vision.CONVERTER,
}


def image_text_converter(family: str, text_family: str) -> Converter:
    """The converter of an image-text model of `family` ("gemma3_vision", "smolvlm", "llama3_2_vision" or
    "llava") whose
    decoder is of `text_family` (what `image_text_model_from_hf_config` returns).

    Raises:
        KeyError: an unknown family or text family, naming the known ones.
    """
    if family == "llava":
        if text_family not in CONVERTERS:
            raise KeyError(
                f"llava: no converter for the text family {text_family!r}; known: {', '.join(CONVERTERS)}."
            )
        return llava.llava_converter(CONVERTERS[text_family])
    if family not in IMAGE_TEXT_CONVERTERS:
        raise KeyError(
            f"No image-text family {family!r}; known: {', '.join([*IMAGE_TEXT_CONVERTERS, 'llava'])}."
        )
    return IMAGE_TEXT_CONVERTERS[family]


def converter_of(family: str) -> Converter | None:
    """The converter of a text family (`CONVERTERS`) or of an image-text one as checkpointers record
    it (`image_text_family`: "gemma3_vision", "smolvlm", "llava_<text family>"); None for any other
    name."""
    if family in CONVERTERS:
        return CONVERTERS[family]
    if family in IMAGE_TEXT_CONVERTERS:
        return IMAGE_TEXT_CONVERTERS[family]
    text = family.removeprefix("llava_")
    return llava.llava_converter(CONVERTERS[text]) if text != family and text in CONVERTERS else None


__all__ = [
    "COMPONENT_BUILDERS",
    "CONVERTERS",
    "FAMILIES",
    "IMAGE_TEXT",
    "IMAGE_TEXT_CONVERTERS",
    "SAME_ARCHITECTURE",
    "SUPPORTED_ARCHITECTURES",
    "Converter",
    "builder_kwargs",
    "converter_of",
    "family_from_hf_config",
    "image_text_converter",
    "image_text_family",
    "image_text_kind",
    "image_text_model_from_hf_config",
    "image_text_text_config",
    "is_image_text_model_config",
    "model_from_hf_config",
    "text_model_config",
]
