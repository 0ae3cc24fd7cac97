"""A gated cross-attention decoder layer: how a text decoder reads images (Llama 3.2 Vision).

The layer sits among the self-attention layers (at the published indices, e.g. 3, 8, ..., 38 of
Llama 3.2 11B Vision's 40) and adds to the residual stream what the text finds in the images, through
two tanh gates initialised at zero (so a fresh layer starts as the identity):

    h = x + tanh(attn_gate) * cross_attn(attn_norm(x), images)
    out = h + tanh(mlp_gate) * rows * mlp(mlp_norm(h))

`rows` is 0 for a text token that attends to no image tile (a token before the sample's first image,
or a sample without images), 1 otherwise. As in transformers' `MllamaCrossAttentionDecoderLayer`, such
a token's attention is not masked out but runs over every image token of its sample (the mask of
`CrossAttendInputs` allows them all); only its feed-forward term is zeroed.
"""

from typing import NamedTuple

import torch
from torch import nn

from ftune.modules.cross_attention import CrossAttention


class CrossAttendInputs(NamedTuple):
    """What the cross-attention layers of one forward read.

    Attributes:
        images: projected image features (b, n, embed_dim); None = the ones in each layer's cache.
        mask: bool (b, s, n), True = may attend; rows that attend to no tile are all True.
        rows: bool (b, s), True for a text token that attends to at least one image tile.
    """

    images: torch.Tensor | None
    mask: torch.Tensor
    rows: torch.Tensor


class CrossAttentionLayer(nn.Module):
    """Gated cross-attention + gated feed-forward, pre-norm; the identity when there are no images.

    The attention is `cross_attn` (its keys differ from a self-attention layer's `attn.*`, as in
    transformers, so an adapter's key names its kind); `attn` reads the same module, for the decoder's
    cache calls (`setup_caches`, `reset_caches`, ...) that treat every layer alike.

    Args:
        attn: the cross-attention.
        mlp: feed-forward block.
        attn_norm: norm before the cross-attention (HF `input_layernorm`).
        mlp_norm: norm before the feed-forward (HF `post_attention_layernorm`).
    """

    def __init__(
        self, *, attn: CrossAttention, mlp: nn.Module, attn_norm: nn.Module, mlp_norm: nn.Module
    ) -> None:
        super().__init__()
        self.attn_norm = attn_norm
        self.cross_attn = attn
        self.attn_gate = nn.Parameter(torch.zeros(1))
        self.mlp_norm = mlp_norm
        self.mlp = mlp
        self.mlp_gate = nn.Parameter(torch.zeros(1))

    @property
    def attn(self) -> CrossAttention:
        """`cross_attn`, under the name the decoder's cache calls use for every layer."""
        return self.cross_attn

    def forward(self, x: torch.Tensor, cross: CrossAttendInputs | None) -> torch.Tensor:
        """(b, s, embed_dim) -> (b, s, embed_dim); `x` itself when there are no images (neither
        `cross` nor cached ones), as transformers skips the layer."""
        if cross is None or (cross.images is None and not self.cross_attn.has_images()):
            return x
        h = x + self.attn_gate.tanh() * self.cross_attn(self.attn_norm(x), cross.images, cross.mask)
        ff = self.mlp(self.mlp_norm(h)) * cross.rows[..., None].to(h.dtype)
        return h + self.mlp_gate.tanh() * ff
