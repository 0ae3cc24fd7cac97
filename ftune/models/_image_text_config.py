"""Build the image-text model an HF image-text config.json describes (random weights).

    family, text_family, model = image_text_model_from_hf_config(json.load(open("config.json")))

Four layouts: Gemma 3 (model_type "gemma3", Gemma3ForConditionalGeneration), SmolVLM (model_type
"idefics3" or "smolvlm"), LLaVA with a SigLIP tower (model_type "llava", the `llava` builder) and
Llama 3.2 Vision (model_type "mllama", `ftune.models.llama3_2_vision`).
A key a config.json omits takes transformers' (5.24) default, as transformers itself would.
"""

from contextlib import nullcontext
from typing import Any

import torch

from ftune.models._hf_config import (
    _default_dtype,
    family_from_hf_config,
    model_from_hf_config,
    text_model_config,
)
from ftune.models.gemma3._vision import IMAGE_TOKEN_ID as GEMMA3_IMAGE_TOKEN_ID
from ftune.models.gemma3._vision import TOKENS_PER_IMAGE as GEMMA3_TOKENS_PER_IMAGE
from ftune.models.gemma3._vision import gemma3_image_text
from ftune.models.llama3_2_vision._hf_config import MODEL_TYPE as MLLAMA_MODEL_TYPE
from ftune.models.llama3_2_vision._hf_config import llama3_2_vision_from_hf_config
from ftune.models.llava import llava
from ftune.models.smolvlm import smolvlm
from ftune.modules.vision.image_text_model import ImageTextModel

# transformers 5.24's defaults for the keys a vision_config may omit: SiglipVisionConfig (Gemma 3,
# LLaVA) and Idefics3VisionConfig / SmolVLMVisionConfig (tests/models/test_image_text_config.py).
SIGLIP_DEFAULTS: dict[str, Any] = dict(
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_channels=3,
    image_size=224,
    patch_size=16,
    hidden_act="gelu_pytorch_tanh",
    layer_norm_eps=1e-6,
)
IDEFICS3_VISION_DEFAULTS: dict[str, Any] = {
    **SIGLIP_DEFAULTS,
    "hidden_size": 1152,
    "num_attention_heads": 16,
    "patch_size": 32,
}
# model_type -> (ftune family, defaults of its vision_config).
IMAGE_TEXT_MODEL_TYPES: dict[str, tuple[str, dict[str, Any]]] = {
    "gemma3": ("gemma3_vision", SIGLIP_DEFAULTS),
    "idefics3": ("smolvlm", IDEFICS3_VISION_DEFAULTS),
    "smolvlm": ("smolvlm", IDEFICS3_VISION_DEFAULTS),
    "llava": ("llava", SIGLIP_DEFAULTS),
    MLLAMA_MODEL_TYPE: ("llama3_2_vision", {}),  # its own encoder: `llama3_2_vision_from_hf_config`
}
# The family whose decoder's self-attention layers are Llama 3.1's (its converter is its own).
MLLAMA_TEXT_FAMILY = "llama3_1"
# Idefics3Config / SmolVLMConfig: image_token_id, scale_factor; LlavaConfig: image_token_index,
# vision_feature_layer, multimodal_projector_bias.
IDEFICS3_IMAGE_TOKEN_ID, IDEFICS3_SCALE_FACTOR = 128_257, 2
LLAVA_IMAGE_TOKEN_ID, LLAVA_FEATURE_LAYER = 32_000, -2


def is_image_text_model_config(config: dict[str, Any]) -> bool:
    """True for the config.json of an image-text model ftune builds whole (vision included)."""
    return config.get("model_type") in IMAGE_TEXT_MODEL_TYPES


def _vision_kwargs(config: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    vision = {**defaults, **(config.get("vision_config") or {})}
    for key, accepted in (("hidden_act", "gelu_pytorch_tanh"), ("num_channels", 3)):
        if vision[key] != accepted:
            raise ValueError(
                f"Unsupported image-text config.json vision_config.{key}={vision[key]!r}: ftune's SigLIP encoder "
                f"takes {accepted!r}."
            )
    return dict(
        image_size=vision["image_size"],
        patch_size=vision["patch_size"],
        vision_embed_dim=vision["hidden_size"],
        vision_num_layers=vision["num_hidden_layers"],
        vision_num_heads=vision["num_attention_heads"],
        vision_intermediate_dim=vision["intermediate_size"],
        vision_norm_eps=vision["layer_norm_eps"],
    )


def _text_config(config: dict[str, Any], tie_default: bool) -> dict[str, Any]:
    """text_config, tied as the image-text model ties (its top-level tie_word_embeddings)."""
    text = dict(config.get("text_config") or {})
    text["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", tie_default))
    return text


def _check_model_type(config: dict[str, Any]) -> str:
    model_type = config.get("model_type")
    if model_type not in IMAGE_TEXT_MODEL_TYPES:
        raise ValueError(
            f"Unsupported image-text config.json model_type={model_type!r}: ftune builds "
            f"{', '.join(sorted(IMAGE_TEXT_MODEL_TYPES))} (Gemma 3, SmolVLM as Idefics3 or SmolVLM, LLaVA, "
            "Llama 3.2 Vision)."
        )
    return IMAGE_TEXT_MODEL_TYPES[model_type][0]


def image_text_text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config.json of an image-text model's text decoder, tied as the whole model ties (what ftune
    builds its `decoder` from).

    Raises:
        ValueError: a model_type of no image-text family.
    """
    family = _check_model_type(config)
    if family == "gemma3_vision":
        return text_model_config(config)
    if family == "llama3_2_vision":
        return dict(config.get("text_config") or {})
    return _text_config(config, tie_default=family == "llava")


def image_text_family(config: dict[str, Any]) -> str:
    """The image-text family of an HF config.json, as the checkpointer records it: "gemma3_vision",
    "smolvlm", "llama3_2_vision" or "llava_<text family>" (a key `ftune.models.converter_of` takes).

    Raises:
        ValueError: a model_type of no image-text family, or a LLaVA text_config of no ftune family.
    """
    family = _check_model_type(config)
    if family != "llava":
        return family
    return f"llava_{family_from_hf_config(image_text_text_config(config))}"


def _check_llava(config: dict[str, Any]) -> None:
    vision_type = (config.get("vision_config") or {}).get("model_type")
    strategy = config.get("vision_feature_select_strategy", "default")
    act = config.get("projector_hidden_act", "gelu")
    layer = config.get("vision_feature_layer", LLAVA_FEATURE_LAYER)
    for ok, what, fix in (
        (
            vision_type == "siglip_vision_model",
            f"vision_config.model_type={vision_type!r}",
            "'siglip_vision_model'",
        ),
        (
            strategy == "full",
            f"vision_feature_select_strategy={strategy!r}",
            "'full' (SigLIP has no class token)",
        ),
        (act == "gelu", f"projector_hidden_act={act!r}", "'gelu'"),
        (isinstance(layer, int), f"vision_feature_layer={layer!r}", "one layer index (an int)"),
    ):
        if not ok:
            raise ValueError(f"Unsupported LLaVA config.json {what}: ftune's llava builder takes {fix}.")


def image_text_model_from_hf_config(
    config: dict[str, Any], *, dtype: torch.dtype | None = None, device: torch.device | str | None = None
) -> tuple[str, str, ImageTextModel]:
    """Build the `ImageTextModel` an HF image-text config.json describes.

    Args:
        config: the parsed config.json (model_type gemma3, idefics3, smolvlm, llava or mllama).
        dtype: parameter dtype; None = the current default dtype.
        device: where to allocate; "meta" builds without memory.

    Returns:
        (family, text family, model): family is "gemma3_vision", "smolvlm", "llava" or
        "llama3_2_vision"; the text family names the decoder's converter (`ftune.models.CONVERTERS`;
        Llama 3.2 Vision's whole model converts with its own, `ftune.models.llama3_2_vision.CONVERTER`).

    Raises:
        ValueError: another model_type, or an option ftune does not implement.
    """
    _check_model_type(config)
    family, defaults = IMAGE_TEXT_MODEL_TYPES[config["model_type"]]
    if family == "llama3_2_vision":
        with _default_dtype(dtype), torch.device(device) if device is not None else nullcontext():
            return family, MLLAMA_TEXT_FAMILY, llama3_2_vision_from_hf_config(config)
    vision = _vision_kwargs(config, defaults)
    if family == "llava":
        _check_llava(config)
    text = config if family == "gemma3_vision" else _text_config(config, tie_default=family == "llava")
    with _default_dtype(dtype), torch.device(device) if device is not None else nullcontext():
        text_family, decoder = model_from_hf_config(text)
        if family == "gemma3_vision":
            model = gemma3_image_text(
                decoder=decoder,
                tokens_per_image=config.get("mm_tokens_per_image", GEMMA3_TOKENS_PER_IMAGE),
                image_token_id=config.get("image_token_index", GEMMA3_IMAGE_TOKEN_ID),
                **vision,
            )
        elif family == "smolvlm":
            model = smolvlm(
                decoder=decoder,
                scale_factor=config.get("scale_factor", IDEFICS3_SCALE_FACTOR),
                image_token_id=config.get("image_token_id", IDEFICS3_IMAGE_TOKEN_ID),
                **vision,
            )
        else:
            model = llava(
                decoder=decoder,
                image_token_id=config.get("image_token_index", LLAVA_IMAGE_TOKEN_ID),
                feature_layer=config.get("vision_feature_layer", LLAVA_FEATURE_LAYER),
                projector_bias=bool(config.get("multimodal_projector_bias", True)),
                **vision,
            )
    return family, text_family, model
