"""Gemma 3 image-text checkpoints (4B, 12B, 27B: Gemma3ForConditionalGeneration) -> their text decoder.

Their config.json has model_type "gemma3" with a `text_config` and a `vision_config`; their
weights hold the text decoder under a prefix, plus the vision tower and the projector:

    transformers v4 layout (what transformers 5.24's save_pretrained still writes):
        language_model.model.<decoder key>, language_model.lm_head.weight, vision_tower.*, multi_modal_projector.*
    transformers v5 layout (its modules' own names):
        model.language_model.<decoder key>, lm_head.weight, model.vision_tower.*, model.multi_modal_projector.*

ftune fine-tunes the text decoder: the functions here turn such a config.json into the config.json
of the equivalent Gemma3ForCausalLM (model_type "gemma3_text") and the weights into that model's
names, and say what they left out. Pure: dicts in, dicts out, no I/O.
"""

from collections.abc import Mapping
from typing import Any

import torch

from ftune.models.gemma3._component_builders import FULL, SLIDING
from ftune.models.gemma3._hf_config import GLOBAL_ROPE_BASE, LOCAL_ROPE_BASE, SLIDING_WINDOW_PATTERN

IMAGE_TEXT_MODEL_TYPE = "gemma3"
IMAGE_TEXT_ARCHITECTURE = "Gemma3ForConditionalGeneration"
TEXT_MODEL_TYPE = "gemma3_text"
TEXT_ARCHITECTURE = "Gemma3ForCausalLM"
# For the checkpointer's messages.
DESCRIPTION = "Gemma 3 image-text checkpoint (Gemma3ForConditionalGeneration)"
SKIPPED_PARTS = "the vision tower and the multi-modal projector"
SAVED_AS = (
    "its text decoder as a text-only Gemma3ForCausalLM folder (config.json from text_config, "
    "model_type gemma3_text), which transformers loads with AutoModelForCausalLM, and LoRA adapters "
    "for that text-only model"
)

# What transformers (5.24, Gemma3TextConfig) takes for a key `text_config` omits; Google's 4B/12B/27B
# config.json omit most of these (e.g. the 4B's text_config holds only hidden_size, intermediate_size,
# num_hidden_layers, rope_scaling, sliding_window), so they must be transformers' values, not ftune's.
# RoPE bases and the local/global layer pattern are defaulted by the Gemma 3 config reader
# (`_hf_config.py`), with transformers' values as well, because they come in two layouts.
TEXT_CONFIG_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131_072,
    "rms_norm_eps": 1e-6,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "attention_bias": False,
    "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
    "use_bidirectional_attention": False,
}
# Gemma3Config's own default: Gemma3ForConditionalGeneration ties lm_head to the embeddings by the
# top-level tie_word_embeddings (transformers reads it from the model's config, the top-level one).
TIE_DEFAULT = True

# Prefix of the text decoder's keys -> prefix in Gemma3ForCausalLM's names.
_TEXT_PREFIXES = {
    "language_model.model.": "model.",  # v4
    "language_model.lm_head.": "lm_head.",  # v4, untied models only
    "model.language_model.": "model.",  # v5
    "lm_head.": "lm_head.",  # v5
}
_SKIPPED_PREFIXES = (
    "vision_tower.",
    "multi_modal_projector.",
    "model.vision_tower.",
    "model.multi_modal_projector.",
)


def is_image_text_config(config: Mapping[str, Any]) -> bool:
    """True for the config.json of a Gemma 3 image-text checkpoint (model_type "gemma3")."""
    return config.get("model_type") == IMAGE_TEXT_MODEL_TYPE or (
        "model_type" not in config and IMAGE_TEXT_ARCHITECTURE in (config.get("architectures") or [])
    )


def omitted_text_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """The keys the image-text config's `text_config` omits and transformers defaults, with the value
    it takes for each (for the message saying so): those of `TEXT_CONFIG_DEFAULTS`, and the RoPE
    bases and layer pattern when no key of either layout gives them."""
    text = config.get("text_config") or {}
    omitted = {k: v for k, v in TEXT_CONFIG_DEFAULTS.items() if k not in text}
    rope = text.get("rope_parameters") or {}
    if "rope_theta" not in text and "rope_theta" not in (rope.get(FULL) or rope):
        omitted["rope_theta"] = GLOBAL_ROPE_BASE
    if "rope_local_base_freq" not in text and "rope_theta" not in (rope.get(SLIDING) or {}):
        omitted["rope_local_base_freq"] = LOCAL_ROPE_BASE
    if not {"layer_types", "sliding_window_pattern", "_sliding_window_pattern"} & text.keys():
        omitted["sliding_window_pattern"] = SLIDING_WINDOW_PATTERN
    return omitted


def text_only_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config.json of the Gemma3ForCausalLM that is the text decoder of an image-text config.

    `text_config` with transformers' defaults for what it omits, model_type "gemma3_text",
    architectures ["Gemma3ForCausalLM"], the top-level tie_word_embeddings (what the image-text
    model ties by) and the top-level dtype. Other configs are returned unchanged.
    """
    if not is_image_text_config(config):
        return dict(config)
    # The first two keys are placed first (for readers of the file), then set.
    text = {
        "architectures": None,
        "model_type": None,
        **TEXT_CONFIG_DEFAULTS,
        **(config.get("text_config") or {}),
    }
    text["architectures"], text["model_type"] = [TEXT_ARCHITECTURE], TEXT_MODEL_TYPE
    text["tie_word_embeddings"] = bool(config.get("tie_word_embeddings", TIE_DEFAULT))
    for key in ("dtype", "torch_dtype"):
        if key in config:
            text[key] = config[key]
    return text


def text_decoder_key(key: str) -> str | None:
    """The Gemma3ForCausalLM name of an image-text checkpoint's tensor; None for the vision tower and
    projector (not part of the text decoder).

    Raises:
        KeyError: a key of neither part, naming it and the accepted prefixes.
    """
    for prefix, new in _TEXT_PREFIXES.items():
        if key.startswith(prefix):
            return new + key[len(prefix) :]
    if key.startswith(_SKIPPED_PREFIXES):
        return None
    raise KeyError(
        f"{key!r} is not a tensor of a Gemma 3 image-text checkpoint: expected the text decoder under "
        f"{', '.join(_TEXT_PREFIXES)} or the vision parts under {', '.join(_SKIPPED_PREFIXES)}."
    )


def split_text_decoder(
    state: Mapping[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(text decoder in Gemma3ForCausalLM names, skipped vision tower + projector tensors under
    their own names); tensors are shared, not copied.

    Raises:
        KeyError: see `text_decoder_key`.
    """
    text, skipped = {}, {}
    for key, tensor in state.items():
        new = text_decoder_key(key)
        if new is None:
            skipped[key] = tensor
        else:
            text[new] = tensor
    return text, skipped
