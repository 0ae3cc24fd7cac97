"""Gemma 2 config.json -> keyword arguments of the `gemma2` component builder.

Reads both layouts transformers has written: v4 (`rope_theta`, no `layer_types`: the releases) and
v5 (`rope_parameters`, `layer_types`). A key the file leaves out takes transformers' (5.24,
Gemma2Config) default, named below; options ftune does not implement raise instead of being ignored.
"""

from typing import Any

GELU_TANH = "gelu_pytorch_tanh"
# Gemma2Config's defaults for keys a config.json may omit (an explicit null cap means no cap).
DEFAULT_ROPE_BASE, DEFAULT_ATTN_SOFTCAP, DEFAULT_FINAL_SOFTCAP = 10_000.0, 50.0, 30.0
DEFAULT_SLIDING_WINDOW, DEFAULT_QUERY_PRE_ATTN_SCALAR = 4096, 256


def _require(config: dict[str, Any], key: str) -> Any:
    if key not in config:
        raise ValueError(f"Gemma 2 config.json is missing {key!r}, which ftune needs to size the model.")
    return config[key]


def _check_options(config: dict[str, Any]) -> None:
    for key in ("hidden_activation", "hidden_act"):
        if config.get(key) not in (None, GELU_TANH):
            raise ValueError(
                f"Unsupported Gemma 2 config.json {key}={config[key]!r}: ftune's GeGLU uses {GELU_TANH!r}."
            )
    for key in ("attention_bias", "use_bidirectional_attention"):
        if config.get(key):
            raise ValueError(
                f"Unsupported Gemma 2 config.json {key}=true: ftune builds the causal, bias-free model."
            )
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ValueError(
            f"Unsupported Gemma 2 config.json RoPE of type {rope_type!r}: every Gemma 2 release uses 'default', "
            "the only type ftune builds for this family."
        )


def gemma2_builder_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of `ftune.models.gemma2.gemma2` read from a Gemma 2 config.json.

    Raises:
        ValueError: for a missing size or an option ftune does not implement (another activation,
            attention bias, bidirectional attention, RoPE scaling).
    """
    _check_options(config)
    num_heads = _require(config, "num_attention_heads")
    params = config.get("rope_parameters") or {}
    kwargs: dict[str, Any] = {
        "vocab_size": _require(config, "vocab_size"),
        "num_layers": _require(config, "num_hidden_layers"),
        "num_heads": num_heads,
        "num_kv_heads": config.get("num_key_value_heads") or num_heads,
        "embed_dim": _require(config, "hidden_size"),
        "intermediate_dim": _require(config, "intermediate_size"),
        "max_seq_len": _require(config, "max_position_embeddings"),
        "head_dim": _require(config, "head_dim"),
        "sliding_window": config.get("sliding_window", DEFAULT_SLIDING_WINDOW),
        "query_pre_attn_scalar": config.get("query_pre_attn_scalar", DEFAULT_QUERY_PRE_ATTN_SCALAR),
        "attn_logit_softcap": config.get("attn_logit_softcapping", DEFAULT_ATTN_SOFTCAP),
        "final_logit_softcap": config.get("final_logit_softcapping", DEFAULT_FINAL_SOFTCAP),
        "rope_base": float(config.get("rope_theta", params.get("rope_theta", DEFAULT_ROPE_BASE))),
        "norm_eps": float(config.get("rms_norm_eps", 1e-6)),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", True)),
    }
    if config.get("layer_types") is not None:
        kwargs["layer_types"] = list(config["layer_types"])
    return kwargs
