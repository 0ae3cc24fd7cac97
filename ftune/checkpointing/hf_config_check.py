"""config.json against the model: a folder whose config.json disagrees with what is built is reported.

Transformers rebuilds the model from config.json, so a config.json that says 30 layers next to
weights and a builder of 24 yields a folder nothing else can load. Shapes that disagree are an
error (the weights cannot mean what config.json says); other fields (RoPE base, norm epsilon,
context length) change numerics or limits, not loading, so they are one warning line each.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

logger = logging.getLogger(__name__)

_FIX = (
    "Fix config.json (it must describe these weights), or point checkpointer.checkpoint_dir / the "
    "model section at the matching pair."
)


def _report(path: Path, errors: list[str], warnings: list[str], against: str) -> None:
    for text in warnings:
        logger.warning("%s disagrees with %s: %s.", path, against, text)
    if errors:
        raise ValueError(f"{str(path)!r} disagrees with {against}: {'; '.join(errors)}. {_FIX}")


def _compare(
    config: Mapping[str, Any], actual: Mapping[str, Any], shapes: set[str]
) -> tuple[list[str], list[str]]:
    errors, warnings = [], []
    for key, value in actual.items():
        if key not in config or config[key] is None or value is None:
            continue
        stated = config[key]
        same = (
            abs(float(stated) - float(value)) <= 1e-12 * max(1.0, abs(float(value)))
            if isinstance(value, float)
            else stated == value
        )
        if not same:
            (errors if key in shapes else warnings).append(
                f"{key} is {stated!r} there, {value!r} in the model"
            )
    return errors, warnings


_SHAPES = {
    "num_hidden_layers",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
}


def check_against_model(config: Mapping[str, Any], path: Path, model: nn.Module) -> None:
    """Compare config.json with a built ftune decoder (the config's `model` section).

    Raises:
        ValueError: a shape field (layers, vocabulary, widths, heads) differs, naming each field.
    """
    layers = getattr(model, "layers", None)
    if layers is None or len(layers) == 0:
        return  # not an ftune decoder (a custom component): nothing to compare
    attn, mlp = layers[0].attn, layers[0].mlp
    # config.json's rope_theta is the global layers' base: Gemma 3's sliding-window layers have their
    # own (rope_local_base_freq), so read it from the first layer without a window.
    global_attn = next(
        (layer.attn for layer in layers if not getattr(layer.attn, "sliding_window", None)), attn
    )
    actual: dict[str, Any] = {
        "num_hidden_layers": len(layers),
        "vocab_size": model.tok_embeddings.weight.shape[0],
        "hidden_size": model.tok_embeddings.weight.shape[1],
        "intermediate_size": mlp.gate_proj.weight.shape[0],
        "num_attention_heads": attn.num_heads,
        "num_key_value_heads": attn.num_kv_heads,
        "head_dim": attn.head_dim,
        "max_position_embeddings": model.max_seq_len,
        "rms_norm_eps": float(model.norm.eps),
        "rope_theta": float(global_attn.rope.base),
    }
    errors, warnings = _compare(config, actual, _SHAPES)
    _report(path, errors, warnings, "the model built from the config's model section")


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
    errors, _ = _compare(config, actual, _SHAPES)
    _report(path, errors, [], "the weights next to it")
