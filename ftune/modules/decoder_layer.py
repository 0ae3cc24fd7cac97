"""One pre-norm transformer decoder layer."""

import torch
from torch import nn

from ftune.modules.attention import GroupedQueryAttention


class DecoderLayer(nn.Module):
    """h = x + attn(attn_norm(x)); out = h + mlp(mlp_norm(h)).

    Args:
        attn: self-attention block.
        mlp: feed-forward block.
        attn_norm: norm applied before attention (HF `input_layernorm`).
        mlp_norm: norm applied before the feed-forward (HF `post_attention_layernorm`).
    """

    def __init__(
        self, *, attn: GroupedQueryAttention, mlp: nn.Module, attn_norm: nn.Module, mlp_norm: nn.Module
    ) -> None:
        super().__init__()
        self.attn_norm = attn_norm
        self.attn = attn
        self.mlp_norm = mlp_norm
        self.mlp = mlp

    def forward(
        self, x: torch.Tensor, *, input_pos: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(b, s, embed_dim) -> (b, s, embed_dim); `input_pos` and `mask` as in `GroupedQueryAttention`."""
        h = x + self.attn(self.attn_norm(x), input_pos=input_pos, mask=mask)
        return h + self.mlp(self.mlp_norm(h))
