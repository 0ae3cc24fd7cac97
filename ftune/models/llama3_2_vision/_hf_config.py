"""Llama 3.2 Vision from its HF config.json (model_type "mllama"); a key the config omits takes
transformers 5.24's default (MllamaVisionConfig, MllamaTextConfig, MllamaConfig)."""

from typing import Any

from ftune.models.llama3_2_vision._component_builders import llama3_2_vision
from ftune.modules.vision.cross_attention_model import CrossAttentionImageTextModel

MODEL_TYPE = "mllama"
VISION_DEFAULTS: dict[str, Any] = dict(
    hidden_size=1280,
    hidden_act="gelu",
    num_hidden_layers=32,
    num_global_layers=8,
    attention_heads=16,
    num_channels=3,
    intermediate_size=5120,
    image_size=448,
    patch_size=14,
    norm_eps=1e-5,
    max_num_tiles=4,
    intermediate_layers_indices=[3, 7, 15, 23, 30],
    supported_aspect_ratios=[[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]],
)
TEXT_DEFAULTS: dict[str, Any] = dict(
    vocab_size=128_256,
    hidden_size=4096,
    hidden_act="silu",
    num_hidden_layers=40,
    num_attention_heads=32,
    num_key_value_heads=8,
    intermediate_size=14_336,
    rms_norm_eps=1e-5,
    max_position_embeddings=131_072,
    cross_attention_layers=[3, 8, 13, 18, 23, 28, 33, 38],
)
IMAGE_TOKEN_ID = 128_256
_ROPE_DEFAULT = dict(rope_type="default", rope_theta=500_000.0)


def _rope(text: dict[str, Any]) -> dict[str, Any]:
    """RoPE arguments of `llama3_2_vision` from rope_parameters (transformers 5) or rope_scaling."""
    rope = text.get("rope_parameters") or text.get("rope_scaling") or _ROPE_DEFAULT
    kind = rope.get("rope_type", rope.get("type", "default"))
    base = rope.get("rope_theta", text.get("rope_theta", 500_000.0))
    if kind == "default":  # no frequency scaling: factor 1 leaves every frequency as it is
        return dict(rope_base=base, scale_factor=1.0)
    if kind != "llama3":
        raise ValueError(
            f"Unsupported Llama 3.2 Vision config.json text_config rope_type={kind!r}: ftune takes 'llama3' "
            "(the published checkpoints') or 'default'."
        )
    return dict(
        rope_base=base,
        scale_factor=rope["factor"],
        low_freq_factor=rope["low_freq_factor"],
        high_freq_factor=rope["high_freq_factor"],
        original_max_seq_len=rope["original_max_position_embeddings"],
    )


def llama3_2_vision_from_hf_config(config: dict[str, Any]) -> CrossAttentionImageTextModel:
    """Build the model an MllamaForConditionalGeneration config.json describes (random weights).

    Raises:
        ValueError: an activation, channel count or RoPE type ftune does not implement.
    """
    vision = {**VISION_DEFAULTS, **(config.get("vision_config") or {})}
    text = {**TEXT_DEFAULTS, **(config.get("text_config") or {})}
    for where, key, accepted in (
        (vision, "hidden_act", "gelu"),
        (vision, "num_channels", 3),
        (text, "hidden_act", "silu"),
    ):
        if where[key] != accepted:
            part = "vision_config" if where is vision else "text_config"
            raise ValueError(
                f"Unsupported Llama 3.2 Vision config.json {part}.{key}={where[key]!r}: ftune takes {accepted!r}."
            )
    return llama3_2_vision(
        vocab_size=text["vocab_size"],
        num_layers=text["num_hidden_layers"],
        num_heads=text["num_attention_heads"],
        num_kv_heads=text["num_key_value_heads"],
        embed_dim=text["hidden_size"],
        intermediate_dim=text["intermediate_size"],
        max_seq_len=text["max_position_embeddings"],
        cross_attention_layers=list(text["cross_attention_layers"]),
        norm_eps=text["rms_norm_eps"],
        image_size=vision["image_size"],
        patch_size=vision["patch_size"],
        vision_embed_dim=vision["hidden_size"],
        vision_num_layers=vision["num_hidden_layers"],
        vision_num_global_layers=vision["num_global_layers"],
        vision_num_heads=vision["attention_heads"],
        vision_intermediate_dim=vision["intermediate_size"],
        vision_intermediate_layers=list(vision["intermediate_layers_indices"]),
        vision_norm_eps=vision["norm_eps"],
        max_num_tiles=vision["max_num_tiles"],
        num_aspect_ratios=len(vision["supported_aspect_ratios"]),
        image_token_id=config.get("image_token_index", IMAGE_TOKEN_ID),
        **_rope(text),
    )
