"""A decoder layer with norms before and after each block (Gemma 2/3's "sandwich" norms)."""

import torch
from torch import nn

from ftune.modules.attention import GroupedQueryAttention


class SandwichDecoderLayer(nn.Module):
    """h = x + post_attn_norm(attn(attn_norm(x))); out = h + post_mlp_norm(mlp(mlp_norm(h))).

    Same `attn` / `mlp` attributes and call signature as `DecoderLayer`, so `TransformerDecoder`,
    KV caches, activation checkpointing, compile and FSDP treat it alike.

    Args:
        attn: self-attention block.
        mlp: feed-forward block.
        attn_norm: before attention (HF `input_layernorm`).
        post_attn_norm: on the attention output, before the residual add (HF `post_attention_layernorm`).
        mlp_norm: before the feed-forward (HF `pre_feedforward_layernorm`).
        post_mlp_norm: on the feed-forward output, before the residual add (HF `post_feedforward_layernorm`).
    """

    def __init__(
        self,
        *,
        attn: GroupedQueryAttention,
        mlp: nn.Module,
        attn_norm: nn.Module,
        post_attn_norm: nn.Module,
        mlp_norm: nn.Module,
        post_mlp_norm: nn.Module,
    ) -> None:
        super().__init__()
        self.attn_norm = attn_norm
        self.attn = attn
        self.post_attn_norm = post_attn_norm
        self.mlp_norm = mlp_norm
        self.mlp = mlp
        self.post_mlp_norm = post_mlp_norm

    def forward(
        self, x: torch.Tensor, *, input_pos: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(b, s, embed_dim) -> (b, s, embed_dim); `input_pos` and `mask` as in `GroupedQueryAttention`."""
        h = x + self.post_attn_norm(self.attn(self.attn_norm(x), input_pos=input_pos, mask=mask))
        return h + self.post_mlp_norm(self.mlp(self.mlp_norm(h)))
