"""Context parallelism: each sequence split over the ``cp`` ranks of the device mesh.

Every rank of a context-parallel group reads the same batch. The decoder runs only this rank's
contiguous slice of each sequence through its layers, at the slice's global positions (RoPE and the
causal mask see where each token really is), and each attention layer gathers the keys and values of
all slices (`ftune.modules.context_exchange`). After the final norm the slices are gathered back,
so the loss, its token count and everything after the forward read the whole sequence as on one
device: the layers' activations, the largest memory of a long sequence, are split, while the output
projection runs on every rank (the chunked losses keep its logits at one chunk).

Packed and padding-free batches work: their per-document mask is sliced by query rows (each rank
keeps its rows over every key). Refused: image-text models, KV caches (generation) and attention
other than `GroupedQueryAttention`. A rollout (GRPO) decodes on the KV cache with the split lifted
(`whole_sequences`): every rank of a context-parallel group samples the same completions, seeded by
the prompt, whole, as on one device; the update's forwards that follow are split again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch.distributed as dist
from torch import nn

from ftune.modules.attention import GroupedQueryAttention
from ftune.modules.context_exchange import ContextSplit
from ftune.modules.transformer import TransformerDecoder
from ftune.training.features.layers import block_layers


def context_parallel(model: nn.Module, group: dist.ProcessGroup) -> nn.Module:
    """Split each sequence of `model`'s forward over the ranks of `group`, in place (before FSDP2).

    Args:
        model: a TransformerDecoder of `GroupedQueryAttention` layers.
        group: the context-parallel ranks (``ParallelMesh.cp_group``).

    Returns:
        The same model.

    Raises:
        ValueError: a model this split does not cover.
    """
    cp = dist.get_world_size(group)
    if not isinstance(model, TransformerDecoder):
        raise ValueError(_refusal(f"a {type(model).__name__}, not a TransformerDecoder", cp))
    attentions = []
    for i, layer in enumerate(block_layers(model, feature="context_parallel")):
        attn = getattr(layer, "_checkpoint_wrapped_module", layer).attn
        if type(attn) is not GroupedQueryAttention:
            raise ValueError(_refusal(f"layers.{i}.attn, a {type(attn).__name__}", cp))
        attentions.append(attn)
    for attn in attentions:
        attn.context_group = group
    model.context_split = ContextSplit(group)
    return model


@contextmanager
def whole_sequences(model: nn.Module) -> Iterator[None]:
    """Run `model`'s forwards on whole sequences inside the block (no split, no exchange), then split
    again: decoding on the KV cache, which the split refuses. Nothing for a model that is not split.

    Every rank of the group must run the same forwards on the same inputs (a rollout seeded by its
    prompts), so that they leave the block with the same outputs.
    """
    split = getattr(model, "context_split", None)
    if split is None:
        yield
        return
    attentions = [m for m in model.modules() if getattr(m, "context_group", None) is not None]
    model.context_split = None
    for attn in attentions:
        attn.context_group = None
    try:
        yield
    finally:
        model.context_split = split
        for attn in attentions:
            attn.context_group = split.group


def _refusal(what: str, cp: int) -> str:
    return (
        f"context_parallel_dim={cp}: context parallelism splits the sequences of a text decoder whose "
        f"attention is GroupedQueryAttention, and this model has {what}. Set context_parallel_dim=1 "
        "(FSDP2 alone shards it)."
    )
