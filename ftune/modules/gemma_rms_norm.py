"""Gemma's RMSNorm: the learned scale is stored as an offset from one, y = (1 + weight) * norm(x)."""

import torch
from torch import nn


class GemmaRMSNorm(nn.Module):
    """y = (1 + weight) * x / sqrt(mean(x^2) + eps), over the last dimension.

    Differs from `RMSNorm` in two ways, both Gemma's (and Hugging Face's Gemma3RMSNorm): the
    weight is zero-centred (initialised to zeros, the checkpoint stores `weight`, not `1 + weight`,
    so HF conversion stays a rename), and the scale is applied in float32 before the cast back to
    the input dtype (Llama casts first, then scales).

    Args:
        dim: size of the last dimension.
        eps: added to the mean square for numerical stability.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def reset_parameters(self) -> None:
        """Offset back to zeros (the identity scale), e.g. after `to_empty()`."""
        nn.init.zeros_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise `x` of shape (..., dim); returns the same shape and dtype."""
        x_fp32 = x.float()
        normed = x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
