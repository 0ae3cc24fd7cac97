"""Root-mean-square layer norm (Zhang & Sennrich, 2019), as used by Llama, Qwen and Mistral."""

import torch
from torch import nn


class RMSNorm(nn.Module):
    """y = weight * x / sqrt(mean(x^2) + eps), normalised over the last dimension.

    The statistics are computed in float32 whatever the input dtype, and the result is cast
    back before the (learned) scale is applied, the order Hugging Face uses, so bf16 outputs
    match `transformers` bit for bit.

    Args:
        dim: size of the last dimension.
        eps: added to the mean square for numerical stability.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self) -> None:
        """Scale back to ones (the identity scale), e.g. after `to_empty()`."""
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise `x` of shape (..., dim); returns the same shape and dtype."""
        x_fp32 = x.float()
        x_fp32 = x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x_fp32.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
