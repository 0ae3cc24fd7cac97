"""Token embedding multiplied by a constant (Gemma scales by sqrt(embed_dim))."""

import torch
from torch import nn


class ScaledEmbedding(nn.Embedding):
    """`nn.Embedding` whose output is multiplied by `scale`.

    A subclass, so the weight keeps the name `weight` (checkpoints, tied output projections and
    LoRA/QLoRA code see a plain embedding). The scale is rounded to the weight's dtype before the
    multiply, as Hugging Face's Gemma does (sqrt(640) in bf16 is 25.25, not 25.298), so bf16
    outputs match `transformers`.

    Args:
        num_embeddings: vocabulary size.
        embedding_dim: model width.
        scale: the multiplier, e.g. `embedding_dim ** 0.5`.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, *, scale: float) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self.scale = scale

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(b, s) ids -> (b, s, embedding_dim), times `scale` in the weight's dtype."""
        scale = torch.tensor(self.scale, dtype=self.weight.dtype, device=self.weight.device)
        return super().forward(tokens) * scale

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, scale={self.scale}"
