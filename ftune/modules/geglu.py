"""GeGLU feed-forward block (Shazeer, 2020) with the tanh-approximated GELU, as in Gemma."""

import torch
import torch.nn.functional as F
from torch import nn


class GeGLU(nn.Module):
    """down_proj(gelu_tanh(gate_proj(x)) * up_proj(x)).

    The same three projections as `SwiGLU`, under the same Hugging Face names (so LoRA targets
    `gate_proj`, `up_proj`, `down_proj` work unchanged); only the activation differs: GELU with
    the tanh approximation (HF `hidden_activation: gelu_pytorch_tanh`).

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
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))
