"""Gemma 3 (text) config.json -> keyword arguments of the `gemma3` component builder.

Reads both layouts transformers has written: v4 (`rope_theta`, `rope_local_base_freq`,
`rope_scaling`, `sliding_window_pattern`) and v5 (`rope_parameters` keyed by layer type,
`layer_types`). Options ftune does not implement raise instead of being ignored.
"""

from typing import Any

from ftune.models.gemma3._component_builders import FULL, SLIDING

GELU_TANH = "gelu_pytorch_tanh"


def _require(config: dict[str, Any], key: str) -> Any:
    if key not in config:
        raise ValueError(f"Gemma 3 config.json is missing {key!r}, which ftune needs to size the model.")
    return config[key]


def _check_options(config: dict[str, Any]) -> None:
    act = config.get("hidden_activation") or config.get("hidden_act") or GELU_TANH
    if act != GELU_TANH:
        raise ValueError(
            f"Unsupported Gemma 3 config.json hidden_activation={act!r}: ftune's GeGLU uses {GELU_TANH!r}."
        )
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if config.get(key) is not None:
            raise ValueError(
                f"Unsupported Gemma 3 config.json {key}={config[key]}: no released Gemma 3 sets it, and "
                "ftune's losses project hidden states without a soft cap. Set it to null or use transformers."
            )
    for key in ("attention_bias", "use_bidirectional_attention"):
        if config.get(key):
            raise ValueError(
                f"Unsupported Gemma 3 config.json {key}=true: ftune builds the causal, bias-free model."
            )


# What transformers (5.24, Gemma3TextConfig) takes when a config.json leaves them out: the RoPE
# bases of the global and the local layers, and one global layer after five local ones.
GLOBAL_ROPE_BASE, LOCAL_ROPE_BASE, SLIDING_WINDOW_PATTERN = 1_000_000.0, 10_000.0, 6


def _ropes(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(global, local) RoPE parameter dicts, each with rope_theta and rope_type."""
    params = config.get("rope_parameters") or {}
    if FULL in params or SLIDING in params:
        return (
            {"rope_theta": GLOBAL_ROPE_BASE, **(params.get(FULL) or {})},
            {"rope_theta": LOCAL_ROPE_BASE, **(params.get(SLIDING) or {})},
        )
    scaling = dict(config.get("rope_scaling") or {})
    global_rope = {
        "rope_theta": config.get("rope_theta", params.get("rope_theta", GLOBAL_ROPE_BASE)),
        **scaling,
    }
    local_rope = {"rope_theta": config.get("rope_local_base_freq", LOCAL_ROPE_BASE)}
    return global_rope, local_rope


def _rope_type(rope: dict[str, Any]) -> str:
    return rope.get("rope_type", rope.get("type", "default"))


def gemma3_builder_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of `ftune.models.gemma3.gemma3` read from a Gemma 3 text config.json.

    Raises:
        ValueError: for a missing size or an option ftune does not implement (soft-capping,
            bidirectional attention, a RoPE type other than default/linear).
    """
    _check_options(config)
    global_rope, local_rope = _ropes(config)
    if _rope_type(local_rope) != "default":
        raise ValueError(
            f"Unsupported Gemma 3 config.json: local (sliding-window) RoPE of type {_rope_type(local_rope)!r}; "
            "ftune supports 'default' there."
        )
    if _rope_type(global_rope) not in ("default", "linear"):
        raise ValueError(
            f"Unsupported Gemma 3 config.json: global RoPE of type {_rope_type(global_rope)!r}; ftune supports "
            "'default' and 'linear' (Gemma 3 4B/12B/27B)."
        )
    num_heads = _require(config, "num_attention_heads")
    num_layers = _require(config, "num_hidden_layers")
    kwargs: dict[str, Any] = {
        "vocab_size": _require(config, "vocab_size"),
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": config.get("num_key_value_heads") or num_heads,
        "embed_dim": _require(config, "hidden_size"),
        "intermediate_dim": _require(config, "intermediate_size"),
        "max_seq_len": _require(config, "max_position_embeddings"),
        "head_dim": _require(config, "head_dim"),
        "sliding_window": _require(config, "sliding_window"),
        "query_pre_attn_scalar": _require(config, "query_pre_attn_scalar"),
        "rope_base": float(global_rope["rope_theta"]),
        "local_rope_base": float(local_rope["rope_theta"]),
        "rope_scaling_factor": float(global_rope["factor"]) if _rope_type(global_rope) == "linear" else None,
        "norm_eps": float(config.get("rms_norm_eps", 1e-6)),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", True)),
    }
    if config.get("layer_types") is not None:
        kwargs["layer_types"] = list(config["layer_types"])
    else:
        kwargs["sliding_window_pattern"] = config.get(
            "sliding_window_pattern", config.get("_sliding_window_pattern", SLIDING_WINDOW_PATTERN)
        )
    return kwargs
