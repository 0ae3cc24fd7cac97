"""config.json against the model: a folder whose config.json disagrees with what is built is refused.

Transformers rebuilds the model from config.json, so a config.json that says 30 layers next to
weights and a builder of 24, or a RoPE base of 500000 next to a model trained with 10000, yields a
folder that nothing else computes as ftune did. Every field that changes what the model computes is
compared, and any difference is an error naming the key, both values and the model argument to
change: the shapes (layers, vocabulary, widths, heads, head_dim), RoPE (base, scaling type and its
parameters, the base of Gemma 3's sliding-window layers), the norm epsilon, tied embeddings, the
attention window and which layers use it, and Gemma 3's query scale. The context length
(`max_position_embeddings`) is a limit, not a computation: one warning line. Floats are compared as
the model computes them: two values equal in float32 agree (a GGUF stores them as float32, so
transformers' GGUF loader writes 1e-05 as 9.999999747378752e-06); any larger difference is an error.

RoPE is read in both layouts transformers writes: up to 4.x top-level `rope_theta`, `rope_scaling`
(and Gemma 3's `rope_local_base_freq`), from 5.0 `rope_parameters` (flat, or keyed by layer type as
for Gemma 3). A config.json that states one of them twice with two values is refused as well.
"""

from __future__ import annotations

import logging
import re
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from ftune.modules.linear_rope_scaling import LinearRopeScaling
from ftune.modules.rope import Llama3RopeScaling

logger = logging.getLogger(__name__)

_FIX = (
    "Fix config.json (it must describe these weights), or point checkpointer.checkpoint_dir / the "
    "model section at the matching pair."
)
# HF key -> the argument of ftune's model builders that sets it (their docstrings say `[hf_key]`).
_ARG = {
    "num_hidden_layers": "num_layers",
    "vocab_size": "vocab_size",
    "hidden_size": "embed_dim",
    "intermediate_size": "intermediate_dim",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "head_dim": "head_dim",
    "max_position_embeddings": "max_seq_len",
    "rms_norm_eps": "norm_eps",
    "tie_word_embeddings": "tie_word_embeddings",
    "rope_theta": "rope_base",
    "local rope_theta": "local_rope_base",
    "local rope_type": "a builder with that RoPE scaling on the sliding layers (gemma3's have none)",
    "rope_type": "a builder with that RoPE scaling, e.g. llama3_1 for 'llama3'",
    "factor": "scale_factor, or gemma3's rope_scaling_factor",
    "low_freq_factor": "low_freq_factor",
    "high_freq_factor": "high_freq_factor",
    "original_max_position_embeddings": "original_max_seq_len",
    "sliding_window": "sliding_window",
    "layer_types": "layer_types",
    "query_pre_attn_scalar": "query_pre_attn_scalar",
    "moe_intermediate_size": "moe_intermediate_dim",
    "num_experts_per_tok": "top_k",
    "norm_topk_prob": "norm_topk_prob",
    "attn_logit_softcapping": "attn_logit_softcap",
    "final_logit_softcapping": "final_logit_softcap",
}
# Keys whose null is a value (no soft cap), compared like any other.
_NULL_MEANS_NONE = {"attn_logit_softcapping", "final_logit_softcapping"}
_WARN_ONLY = {"max_position_embeddings"}
_ROPE_KEYS = ("rope_theta", "rope_type", "factor", "low_freq_factor", "high_freq_factor")
_ROPE_KEYS += ("original_max_position_embeddings",)
FULL, SLIDING = "full_attention", "sliding_attention"  # HF `layer_types` values


class _Stated(NamedTuple):
    key: str  # where config.json says it, e.g. "rope_parameters.rope_theta"
    value: Any


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _float32(x: float) -> float:
    """`x` rounded to float32 (the precision a model computes norm epsilons, RoPE bases, soft caps and
    scales in, and GGUF stores them in); a value beyond float32's range stays as it is."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return x


def _same(a: Any, b: Any) -> bool:
    """Equal; numbers of a float field equal once in float32, as the model computes them (transformers'
    GGUF loader writes `rms_norm_eps: 9.999999747378752e-06` for the 1e-05 stored as a float32; a JSON
    int for a float field is the same number)."""
    if _is_number(a) and _is_number(b) and (isinstance(a, float) or isinstance(b, float)):
        return float(a) == float(b) or _float32(float(a)) == _float32(float(b))
    return a == b


def _collect(found: dict[str, list[_Stated]], prefix: str, fields: Mapping[str, Any] | None, name=None):
    """Add the RoPE fields of one dict of config.json (`prefix` names it) to `found`."""
    for field, value in (fields or {}).items():
        field = "rope_type" if field == "type" else field  # transformers 4's older spelling
        if field in _ROPE_KEYS and value is not None:
            found.setdefault(name(field) if name else field, []).append(_Stated(f"{prefix}{field}", value))


def _stated(config: Mapping[str, Any]) -> tuple[dict[str, _Stated], list[str]]:
    """Canonical field -> where and what config.json states, and the fields it states twice differently.

    Canonical fields are the HF keys, RoPE's of the global layers as `rope_theta`, `rope_type`...
    and the base of Gemma 3's sliding-window layers as `local rope_theta`.
    """
    found: dict[str, list[_Stated]] = {}
    for key, value in config.items():
        if key in _ARG and key not in _ROPE_KEYS and (value is not None or key in _NULL_MEANS_NONE):
            found.setdefault(key, []).append(_Stated(key, value))
    if config.get("rope_theta") is not None:
        found.setdefault("rope_theta", []).append(_Stated("rope_theta", config["rope_theta"]))
    if config.get("rope_local_base_freq") is not None:
        found.setdefault("local rope_theta", []).append(
            _Stated("rope_local_base_freq", config["rope_local_base_freq"])
        )
    _collect(found, "rope_scaling.", config.get("rope_scaling"))
    params = config.get("rope_parameters") or {}
    if FULL in params or SLIDING in params:  # transformers 5, one entry per layer type (Gemma 3)
        _collect(found, f"rope_parameters.{FULL}.", params.get(FULL))
        _collect(found, f"rope_parameters.{SLIDING}.", params.get(SLIDING), name=lambda f: f"local {f}")
        for field in [f for f in found if f.startswith("local ") and f not in _ARG]:
            found.pop(field)  # the scaling parameters of the sliding layers: their type says enough
    else:
        _collect(found, "rope_parameters.", params)
    if "rope_type" not in found:  # no scaling stated in either layout: transformers' plain RoPE
        where = "rope_parameters.rope_type" if config.get("rope_parameters") else "rope_scaling (none)"
        found["rope_type"] = [_Stated(where, "default")]
    twice = [
        " and ".join(f"{s.key} is {s.value!r}" for s in states)
        for states in found.values()
        if any(not _same(s.value, states[0].value) for s in states[1:])
    ]
    return {field: states[-1] for field, states in found.items()}, twice


def _rope_fields(rope: Any, prefix: str = "") -> dict[str, Any]:
    """The canonical RoPE fields of one ftune `RotaryEmbedding` (`prefix` "local " for the sliding layers:
    their base and type only)."""
    fields = _rope_of(rope)
    return {f"{prefix}{k}": v for k, v in fields.items() if not prefix or k in ("rope_theta", "rope_type")}


def _rope_of(rope: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"rope_theta": float(rope.base)}
    scaling = getattr(rope, "scaling", None)
    if scaling is None:
        return {**fields, "rope_type": "default"}
    if isinstance(scaling, Llama3RopeScaling):
        return {
            **fields,
            "rope_type": "llama3",
            "factor": float(scaling.factor),
            "low_freq_factor": float(scaling.low_freq_factor),
            "high_freq_factor": float(scaling.high_freq_factor),
            "original_max_position_embeddings": scaling.original_max_seq_len,
        }
    if isinstance(scaling, LinearRopeScaling):
        return {**fields, "rope_type": "linear", "factor": float(scaling.factor)}
    return {**fields, "rope_type": type(scaling).__name__}


def _window(config: Mapping[str, Any]) -> _Stated | None:
    """The attention window config.json sets (Qwen: only with use_sliding_window true); None if it
    has no `sliding_window` key (transformers would take its class default: not compared)."""
    if "sliding_window" not in config:
        return None
    # Mistral and Gemma 3 have no switch (a window set is a window used); Qwen's is off by default.
    uses = config.get("use_sliding_window", config.get("model_type") not in ("qwen2", "qwen3"))
    if not uses and config["sliding_window"] is not None:
        return _Stated("sliding_window (with use_sliding_window false)", None)
    return _Stated("sliding_window", config["sliding_window"])


def _layer_types(config: Mapping[str, Any]) -> list[str] | None:
    if config.get("layer_types") is not None:
        return list(config["layer_types"])
    pattern = config.get("sliding_window_pattern", config.get("_sliding_window_pattern"))
    if config.get("model_type") != "gemma3_text" or not isinstance(pattern, int) or pattern < 1:
        return None
    n = config.get("num_hidden_layers", 0)
    return [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(n)]


def _model_facts(model: nn.Module) -> dict[str, Any] | None:
    """The canonical fields of a built ftune decoder, or None for a model that is not one."""
    layers = getattr(model, "layers", None)
    if layers is None or len(layers) == 0:
        return None  # not an ftune decoder (a custom component): nothing to compare
    attn, mlp = layers[0].attn, layers[0].mlp
    # The global RoPE is that of the first layer without a window (Gemma 3's sliding-window layers
    # have their own base, rope_local_base_freq).
    sliding = [layer.attn for layer in layers if getattr(layer.attn, "sliding_window", None)]
    full = [layer.attn for layer in layers if not getattr(layer.attn, "sliding_window", None)]
    facts: dict[str, Any] = {
        "num_hidden_layers": len(layers),
        "vocab_size": model.tok_embeddings.weight.shape[0],
        "hidden_size": model.tok_embeddings.weight.shape[1],
        "num_attention_heads": attn.num_heads,
        "num_key_value_heads": attn.num_kv_heads,
        "head_dim": attn.head_dim,
        "max_position_embeddings": model.max_seq_len,
        "rms_norm_eps": float(model.norm.eps),
        "tie_word_embeddings": getattr(model, "output", None) is None,
        "sliding_window": max((a.sliding_window for a in sliding), default=None),
        "layer_types": [SLIDING if getattr(layer.attn, "sliding_window", None) else FULL for layer in layers],
        **_rope_fields((full or sliding)[0].rope),
        "attn_logit_softcapping": getattr(attn, "logit_softcap", None),
        "final_logit_softcapping": getattr(model, "final_logit_softcap", None),
    }
    if (gate_proj := getattr(mlp, "gate_proj", None)) is not None:
        facts["intermediate_size"] = gate_proj.weight.shape[0]
    if (router := getattr(mlp, "gate", None)) is not None:  # a mixture of experts (qwen3_moe)
        facts["moe_intermediate_size"] = mlp.experts.hidden_dim
        facts.update(num_experts_per_tok=router.top_k, norm_topk_prob=router.norm_topk_prob)
    if full and sliding:
        facts.update(_rope_fields(sliding[0].rope, prefix="local "))
    if (multiplier := getattr(attn, "q_multiplier", None)) is not None:  # softmax_scale * head_dim ** 0.5
        facts["query_pre_attn_scalar"] = round(
            attn.head_dim / multiplier**2, 6
        )  # compared where config.json has it
    return facts


def _differences(config: Mapping[str, Any], facts: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(errors, warnings): one "KEY is X there, Y in the model (model.ARG)" per field that differs."""
    stated, twice = _stated(config)
    if (window := _window(config)) is not None:
        stated["sliding_window"] = window
    if (types := _layer_types(config)) is not None:
        stated["layer_types"] = _Stated("layer_types", types)
    if "head_dim" not in stated and config.get("hidden_size") and config.get("num_attention_heads"):
        derived = config["hidden_size"] // config["num_attention_heads"]  # transformers' default
        stated["head_dim"] = _Stated("head_dim (hidden_size / num_attention_heads)", derived)
    errors = [f"config.json states {text}, which contradict each other" for text in twice]
    warnings = []
    for field, actual in facts.items():
        nullable = field == "sliding_window" or field in _NULL_MEANS_NONE
        if field not in stated or (stated[field].value is None and not nullable):
            continue
        key, value = stated[field]
        if field == "layer_types":
            if len(value) == len(actual) and (
                diff := [i for i, (a, b) in enumerate(zip(value, actual)) if a != b]
            ):
                errors.append(
                    f"layer_types[{diff[0]}] is {value[diff[0]]!r} there, {actual[diff[0]]!r} in the model "
                    f"({len(diff)} of {len(value)} layers differ; model.layer_types)"
                )
            continue
        if not _same(value, actual):
            text = f"{key} is {value!r} there, {actual!r} in the model"
            if field in _WARN_ONLY:
                warnings.append(text)
            else:
                arg = _ARG[field]
                errors.append(f"{text} (model: {arg})" if " " in arg else f"{text} (model.{arg})")
    return errors, warnings


def check_against_model(config: Mapping[str, Any], path: Path, model: nn.Module) -> None:
    """Compare config.json with a built ftune decoder (the config's `model` section).

    Raises:
        ValueError: a field that changes what the model computes differs (shapes, RoPE in either
            layout, norm epsilon, tied embeddings, attention window, layer types, query scale), or
            config.json states one twice with two values; names each key and both values.
    """
    if (facts := _model_facts(model)) is None:
        return
    errors, warnings = _differences(config, facts)
    against = "the model built from the config's model section"
    for text in warnings:
        logger.warning("%s disagrees with %s: %s.", path, against, text)
    if errors:
        raise ValueError(
            f"{str(path)!r} disagrees with {against}: {'; '.join(errors)}. Each changes what the model "
            "computes, so what ftune trains is not what transformers loads from this folder. Set each "
            "model argument named in parentheses to config.json's value, or "
            "leave the model section out of the config (`~model` on the command line) so that "
            f"config.json gives the family and sizes. Else: {_FIX}"
        )


_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def check_against_weights(
    config: Mapping[str, Any], path: Path, hf_state: Mapping[str, torch.Tensor]
) -> None:
    """Compare config.json with the folder's weights (HF names); shapes only.

    Raises:
        ValueError: the layer count, vocabulary or widths differ, naming each field.
    """
    layer_ids = {int(m.group(1)) for k in hf_state if (m := _LAYER.match(k))}
    actual: dict[str, Any] = {"num_hidden_layers": len(layer_ids) if layer_ids else None}
    if (embed := hf_state.get("model.embed_tokens.weight")) is not None and embed.dim() == 2:
        actual["vocab_size"], actual["hidden_size"] = embed.shape[0], embed.shape[1]
    if (gate := hf_state.get("model.layers.0.mlp.gate_proj.weight")) is not None and gate.dim() == 2:
        actual["intermediate_size"] = gate.shape[0]
    errors = [
        f"{key} is {config[key]!r} there, {value!r} in the model"
        for key, value in actual.items()
        if value is not None and config.get(key) is not None and config[key] != value
    ]
    if errors:
        raise ValueError(f"{str(path)!r} disagrees with the weights next to it: {'; '.join(errors)}. {_FIX}")
