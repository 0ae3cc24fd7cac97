"""SwiGLU feed-forward block (Shazeer, 2020)."""

import torch
import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)).

    The projections are passed in (usually bias-free `nn.Linear`) and named as in Hugging Face,
    so LoRA targets `gate_proj`, `up_proj`, `down_proj` find them by attribute name.

    Args:
        gate_proj: embed_dim -> hidden_dim.
        up_proj: embed_dim -> hidden_dim.
        down_proj: hidden_dim -> embed_dim.
    """

    def __init__(self, *, gate_proj: nn.Module, up_proj: nn.Module, down_proj: nn.Module) -> None:
        super().__init__()
        self.gate_proj = gate_proj
        self.up_proj = up_proj
        self.down_proj = down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., embed_dim) -> (..., embed_dim)."""
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
