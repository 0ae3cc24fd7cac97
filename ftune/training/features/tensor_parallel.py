"""Tensor parallelism (Megatron-LM's split, on DTensor's parallel styles): each decoder layer's
projections sharded over the ``tp`` ranks of the device mesh.

Per layer: q/k/v and gate/up column-wise (each rank computes its heads and its slice of the hidden
width), o and down row-wise (each rank multiplies its slice, one all-reduce sums them). Attention
runs on the rank's own heads, so the attention module is given the local head counts. Norms stay
whole on every tensor-parallel rank and receive the same gradient on each.

The embeddings and the output projection stay whole on each tensor-parallel rank (FSDP2 still
shards them over ``dp``): with tied embeddings (SmolLM2, Llama 3.2) they are one Parameter, which
a vocabulary-sharded embedding and a column-sharded output could not share, and the losses
project the hidden states in chunks themselves (`OutputHead`), not through the output module.

LoRA layers, MoE feed-forwards and image-text models are refused: their forward reads the base
weight directly (merged or NF4 paths, expert tables), which a parallel style's hooks never see.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from ftune.modules.attention import GroupedQueryAttention
from ftune.modules.feed_forward import SwiGLU
from ftune.modules.vision import ImageTextModel
from ftune.training.features.layers import block_layers

# Sub-module -> style. torchtune 0.6.1's base_llama_tp_plan maps here: its attn.{q,k,v}_proj and
# mlp.w1/w3 column-wise, attn.output_proj and mlp.w2 row-wise.
ATTENTION_PLAN = {"q_proj": "colwise", "k_proj": "colwise", "v_proj": "colwise", "o_proj": "rowwise"}
MLP_PLAN = {"gate_proj": "colwise", "up_proj": "colwise", "down_proj": "rowwise"}
_STYLES = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}


def tensor_parallel(model: nn.Module, tp_mesh: DeviceMesh) -> nn.Module:
    """Shard every decoder layer's projections over `tp_mesh`, in place (before FSDP2).

    Args:
        model: a TransformerDecoder of `GroupedQueryAttention` and `SwiGLU` layers, weights loaded.
        tp_mesh: the 1-D tensor-parallel mesh (``ParallelMesh.tp_mesh``).

    Returns:
        The same model; its attention modules now count local heads.

    Raises:
        ValueError: a model or layer this split does not cover, or head counts or the
            feed-forward width that the tensor-parallel ranks do not divide.
    """
    tp = tp_mesh.size()
    if isinstance(model, ImageTextModel):
        raise ValueError(_refusal("an image-text model (its vision encoder has no plan)", tp))
    layers = block_layers(model, feature="tensor_parallel")
    for i, layer in enumerate(layers):
        attn, mlp = _unwrapped(layer).attn, _unwrapped(layer).mlp
        if type(attn) is not GroupedQueryAttention or type(mlp) is not SwiGLU:
            what = f"layers.{i} ({type(attn).__name__} attention, {type(mlp).__name__} feed-forward)"
            raise ValueError(_refusal(what + "; the plan covers GroupedQueryAttention and SwiGLU", tp))
        for name in (*ATTENTION_PLAN, *MLP_PLAN):
            proj = getattr(attn if name in ATTENTION_PLAN else mlp, name)
            if type(proj) is not nn.Linear:
                raise ValueError(_refusal(f"layers.{i}: {name} is a {type(proj).__name__}", tp))
        _check_divides(i, attn, mlp, tp)
        plan = {f"attn.{n}": _STYLES[s]() for n, s in ATTENTION_PLAN.items()}
        plan |= {f"mlp.{n}": _STYLES[s]() for n, s in MLP_PLAN.items()}
        parallelize_module(_unwrapped(layer), tp_mesh, plan)
        attn.num_heads //= tp  # the column shards hold whole heads: attention runs on this rank's own
        attn.num_kv_heads //= tp
    return model


def _unwrapped(layer: nn.Module) -> nn.Module:
    """The decoder layer inside an activation-checkpointing wrapper (or the layer itself)."""
    return getattr(layer, "_checkpoint_wrapped_module", layer)


def _check_divides(i: int, attn: GroupedQueryAttention, mlp: SwiGLU, tp: int) -> None:
    width = mlp.gate_proj.out_features
    for what, count in (
        ("num_heads", attn.num_heads),
        ("num_kv_heads", attn.num_kv_heads),
        ("the feed-forward width", width),
    ):
        if count % tp:
            raise ValueError(
                f"tensor_parallel_dim={tp} does not divide {what} ({count}) of layers.{i}: each "
                "tensor-parallel rank must hold whole heads and an equal slice of the feed-forward. Set "
                "tensor_parallel_dim to a divisor of num_heads, num_kv_heads and the intermediate size."
            )


def _refusal(what: str, tp: int) -> str:
    return (
        f"tensor_parallel_dim={tp}: tensor parallelism splits the projections of plain decoder layers "
        f"(nn.Linear q/k/v/o and gate/up/down), and this model has {what}. Set tensor_parallel_dim=1 "
        "(FSDP2 alone shards it), or use context_parallel_dim for long sequences."
    )
