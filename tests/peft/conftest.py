"""A tiny decoder with ftune's module names (q_proj ... down_proj, output / tied), for the peft tests.

It does not depend on ftune.modules, so the peft tests run on their own; the parity tests against
ftune.models and Hugging Face live in test_peft_parity.py.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn


class ToyAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int, num_kv_heads: int) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, dim // num_heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, num_kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(dim, num_kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class ToyMLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class ToyLayer(nn.Module):
    def __init__(self, dim: int, hidden: int, num_heads: int, num_kv_heads: int) -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attn = ToyAttention(dim, num_heads, num_kv_heads)
        self.mlp = ToyMLP(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class ToyDecoder(nn.Module):
    def __init__(
        self, *, vocab: int = 96, dim: int = 64, hidden: int = 128, layers: int = 2, tied: bool = False
    ):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        nn.init.normal_(self.tok_embeddings.weight, std=0.1)  # N(0, 1) would give tied logits of ~80
        self.layers = nn.ModuleList(ToyLayer(dim, hidden, num_heads=4, num_kv_heads=2) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.output = None if tied else nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        h = self.norm(h)
        return F.linear(h, self.tok_embeddings.weight) if self.output is None else self.output(h)


ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "output"]


@pytest.fixture
def toy_model():
    """Factory: toy_model(seed=0, tied=False) -> ToyDecoder in eval mode, with non-zero biases."""

    def build(seed: int = 0, tied: bool = False) -> ToyDecoder:
        torch.manual_seed(seed)
        model = ToyDecoder(tied=tied).eval()
        return model

    return build


@pytest.fixture
def tokens() -> torch.Tensor:
    return torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(123))


def perturb_adapters(model: nn.Module, seed: int = 1, std: float = 0.02) -> None:
    """Give every adapter tensor (lora_a, lora_b, magnitude) non-trivial values."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("lora_a.weight", "lora_b.weight")):
                p.copy_(torch.randn(p.shape, generator=gen) * std * 4)
            elif name.endswith("magnitude"):
                p.mul_(1 + std * torch.randn(p.shape, generator=gen))


@pytest.fixture
def perturb():
    """perturb(model, seed=1, std=0.02): randomise the adapter tensors of an adapted model."""
    return perturb_adapters
