"""What the memory plan needs to know of a model: its sizes and its parameters, read off the model.

The model is built on the meta device (no memory, no weights read), with the config's adapters
applied, so the counts are exact: every parameter, which of them train, which linears carry an
adapter and of what rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ftune.peft.lora import LoRALinear

GIB = 1024**3


@dataclass(frozen=True)
class ModelShape:
    """The sizes and parameter counts of a decoder.

    Attributes:
        num_layers: decoder layers.
        embed_dim: width of the residual stream (D).
        q_dim: width of the queries, heads x head_dim.
        kv_dim: width of the keys (and of the values), kv heads x head_dim.
        ffn_dim: hidden width of the feed-forward block (F); an MoE's expert width times the experts
            a token visits (its routing and grouping buffers are not counted: an approximation).
        num_heads: query heads.
        vocab_size: rows of the output projection.
        params: every parameter (elements).
        trainable: the parameters that require grad (elements).
        frozen_quantized: frozen base weights stored as NF4 (QLoRA), elements.
        adapter_rank_per_layer: the sum of the ranks of a layer's LoRA adapters (0: none).
        lean_down: the feed-forward's down projection is a trained plain linear, whose input the
            block recomputes in backward instead of keeping (`ftune.modules.feed_forward`).
        tied_output: the output projection is the token embedding.
    """

    num_layers: int
    embed_dim: int
    q_dim: int
    kv_dim: int
    ffn_dim: int
    num_heads: int
    vocab_size: int
    params: int
    trainable: int
    frozen_quantized: int = 0
    adapter_rank_per_layer: int = 0
    lean_down: bool = True
    tied_output: bool = True


def _linear_sizes(module: nn.Module) -> tuple[int, int]:
    """(in, out) of a linear or an adapter wrapping one."""
    weight = module.weight
    return int(weight.shape[1]), int(weight.shape[0])


def shape_of(model: nn.Module, *, quantize_base: bool = False) -> ModelShape:
    """Read a decoder's sizes and counts (``ftune.modules.transformer.TransformerDecoder`` layout).

    Args:
        model: the model, usually on the meta device, adapters applied.
        quantize_base: the adapters' base weights are stored in NF4 (QLoRA; the meta model has
            them unquantized).

    Raises:
        ValueError: the model has no ``layers`` list or its first layer no ``attn``/``mlp`` of the
            shapes ftune's decoders have.
    """
    layers = getattr(model, "layers", None)
    first = layers[0] if isinstance(layers, nn.ModuleList) and len(layers) else None
    attn, mlp = getattr(first, "attn", None), getattr(first, "mlp", None)
    if attn is None or mlp is None or not hasattr(attn, "q_proj"):
        raise ValueError(
            f"the memory plan reads ftune's decoder layout (model.layers[i].attn.q_proj, .mlp); "
            f"{type(model).__name__} has another, so its activations cannot be sized. Plan a config "
            "whose model is one of ftune.models' builders."
        )
    embed_dim, q_dim = _linear_sizes(attn.q_proj)
    kv_dim = _linear_sizes(attn.k_proj)[1]
    if hasattr(mlp, "gate_proj"):
        ffn_dim = _linear_sizes(mlp.gate_proj)[1]
        down = mlp.down_proj
    else:  # MoE: the experts a token visits, each a SwiGLU of the expert width
        ffn_dim = int(mlp.experts.hidden_dim) * int(getattr(getattr(mlp, "gate", None), "top_k", 1))
        down = None
    lean = type(down) is nn.Linear and down.weight.requires_grad
    params = list(model.parameters())
    quantized = 0
    for module in model.modules():
        if isinstance(module, LoRALinear) and quantize_base:
            quantized += module.weight.numel()
    ranks = sum(m.rank for m in first.modules() if isinstance(m, LoRALinear))
    embedding = getattr(model, "tok_embeddings", None)
    output = getattr(model, "output", None)
    vocab = int(embedding.weight.shape[0]) if embedding is not None else int(output.weight.shape[0])
    return ModelShape(
        num_layers=len(layers),
        embed_dim=embed_dim,
        q_dim=q_dim,
        kv_dim=kv_dim,
        ffn_dim=ffn_dim,
        num_heads=int(getattr(attn, "num_heads", max(q_dim // 64, 1))),
        vocab_size=vocab,
        params=sum(p.numel() for p in params),
        trainable=sum(p.numel() for p in params if p.requires_grad),
        frozen_quantized=quantized,
        adapter_rank_per_layer=int(ranks),
        lean_down=lean,
        tied_output=output is None,
    )


def dtype_bytes(dtype: torch.dtype) -> int:
    """Bytes of one element of `dtype`."""
    return torch.empty((), dtype=dtype).element_size()
