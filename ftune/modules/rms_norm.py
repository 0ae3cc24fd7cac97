"""Root-mean-square layer norm (Zhang & Sennrich, 2019), as used by Llama, Qwen and Mistral."""

from typing import Any

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

    #: Save only the input and rstd for backward (`_RMSNormFunction`); False leaves the forward to
    #: autograd (benchmarks switch it off to measure what it saves).
    lean_backward: bool = True

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def reset_parameters(self) -> None:
        """Scale back to ones (the identity scale), e.g. after `to_empty()`."""
        nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise `x` of shape (..., dim); returns the same shape and dtype."""
        needs_grad = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
        if needs_grad and self.lean_backward and not torch.compiler.is_compiling():
            return _RMSNormFunction.apply(x, self.weight, self.eps)
        return rms_norm(x, self.weight, self.eps)[0]

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight * (x / sqrt(mean(x^2) + eps))`` and the fp32 reciprocal root ``(..., 1)``."""
    x_fp32 = x.float()
    rstd = torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + eps)
    normed = (x_fp32 * rstd).to(x.dtype)
    if weight.dtype == normed.dtype and not (
        torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    ):
        return normed.mul_(weight), rstd  # no graph records it: the scale in normed's own buffer, same bits
    return weight * normed, rstd


class _RMSNormFunction(torch.autograd.Function):
    """RMSNorm that saves only its input and the per-row ``rstd`` for backward.

    Left to autograd, the forward above saves the fp32 copy of ``x`` and the normalised ``x``
    besides (SmolLM2-135M, bf16: three times the input's size per norm, two norms a layer). Here
    the normalised input is recomputed in backward. The forward is the same computation, so the
    outputs are bit for bit those of the plain module; gradients agree to float rounding and are
    accumulated in fp32.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        out, rstd = rms_norm(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight, rstd = ctx.saved_tensors
        normed = x.float() * rstd  # (..., dim) fp32, this function's own buffer
        grad_x = grad_weight = None
        if ctx.needs_input_grad[1]:
            # The forward multiplied by normed rounded to x's dtype; use the same factor.
            rows = (grad.float() * normed.to(x.dtype).float()).reshape(-1, normed.shape[-1])
            grad_weight = rows.sum(0).to(weight.dtype)
        if ctx.needs_input_grad[0]:
            grad_normed = (grad * weight).float()  # (..., dim), a new buffer
            # d/dx of x·rstd(x): rstd·(g - normed·mean(g·normed)); the last three steps run in place
            # in this function's own buffers, in the expression's order (the same roundings).
            mean = (grad_normed * normed).mean(-1, keepdim=True)
            grad_x = grad_normed.sub_(normed.mul_(mean)).mul_(rstd).to(x.dtype)
        return grad_x, grad_weight, None
