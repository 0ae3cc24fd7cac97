"""A tiny decoder that follows ftune's model API (hidden / project / head / layers).

It stands in for ftune.models while those are written: causal attention that honours
``mask`` (True = may attend) and learned positions indexed by ``input_pos``, so packed
batches behave like the real thing.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules.transformer import OutputHead


class TinyLayer(nn.Module):
    def __init__(self, dim: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.attn_norm = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = nn.RMSNorm(dim)
        self.up_proj = nn.Linear(dim, 2 * dim, bias=False)
        self.down_proj = nn.Linear(2 * dim, dim, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, s, 3, self.num_heads, -1).unbind(2)  # (b, s, h, hd)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (b, h, s, hd)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])  # (b, h, s, hd)
        x = x + self.dropout(self.o_proj(attn.transpose(1, 2).reshape(b, s, d)))
        return x + self.dropout(self.down_proj(F.silu(self.up_proj(self.mlp_norm(x)))))


class TinyDecoder(nn.Module):
    def __init__(
        self,
        *,
        vocab_size: int = 64,
        dim: int = 32,
        num_layers: int = 2,
        num_heads: int = 4,
        max_seq_len: int = 64,
        tied: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.pos_embeddings = nn.Embedding(max_seq_len, dim)
        self.layers = nn.ModuleList(TinyLayer(dim, num_heads, dropout) for _ in range(num_layers))
        self.norm = nn.RMSNorm(dim)
        self.output = None if tied else nn.Linear(dim, vocab_size, bias=False)

    @property
    def head(self) -> OutputHead:
        return OutputHead(self.tok_embeddings.weight if self.output is None else self.output.weight, None)

    def hidden(
        self, tokens: torch.Tensor, *, input_pos: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        b, s = tokens.shape
        if input_pos is None:
            input_pos = torch.arange(s, device=tokens.device).expand(b, s)
        if mask is None:
            mask = torch.ones(s, s, dtype=torch.bool, device=tokens.device).tril().expand(b, s, s)
        x = self.tok_embeddings(tokens) + self.pos_embeddings(input_pos)  # (b, s, d)
        for layer in self.layers:
            x = layer(x, mask=mask)
        return self.norm(x)

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.head.weight)

    def forward(
        self, tokens: torch.Tensor, *, input_pos: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.project(self.hidden(tokens, input_pos=input_pos, mask=mask))


@pytest.fixture
def tiny_model():
    """Factory: ``tiny_model(seed=0, **sizes)`` builds a seeded TinyDecoder in train mode."""

    def build(seed: int = 0, **kwargs) -> TinyDecoder:
        torch.manual_seed(seed)
        return TinyDecoder(**kwargs).train()

    return build


def make_batch(tokens: list[list[int]], labels: list[list[int]], **extra: list[list[int]]) -> dict:
    """A collated batch from nested lists."""
    batch = {"tokens": torch.tensor(tokens), "labels": torch.tensor(labels)}
    batch.update({k: torch.tensor(v) for k, v in extra.items()})
    return batch


@pytest.fixture
def batch_factory():
    return make_batch
