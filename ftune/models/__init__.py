"""Model families, their converters, and models built from a Hugging Face config.json.

    ftune.models.CONVERTERS["llama3"].hf_to_ftune(sd)      # pure key/layout conversion
    family, model = ftune.models.model_from_hf_config(json.load(open("config.json")))

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
    mistral,
    mixtral,
    phi3,
    phi4,
    qwen2,
    qwen2_5,
    qwen3,
    qwen3_moe,
    smollm2,
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

__all__ = [
    "COMPONENT_BUILDERS",
    "CONVERTERS",
    "FAMILIES",
    "IMAGE_TEXT",
    "SAME_ARCHITECTURE",
    "SUPPORTED_ARCHITECTURES",
    "Converter",
    "builder_kwargs",
    "family_from_hf_config",
    "image_text_kind",
    "model_from_hf_config",
    "text_model_config",
]
