"""SwiGLU feed-forward block (Shazeer, 2020)."""

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor


class SwiGLU(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)).

    The projections are passed in (usually bias-free `nn.Linear`) and named as in Hugging Face,
    so LoRA targets `gate_proj`, `up_proj`, `down_proj` find them by attribute name.

    Args:
        gate_proj: embed_dim -> hidden_dim.
        up_proj: embed_dim -> hidden_dim.
        down_proj: hidden_dim -> embed_dim.
    """

    #: Save only gate and up for backward (`_SiluMul`); False leaves the product to autograd
    #: (benchmarks switch it off to measure what it saves).
    lean_backward: bool = True

    def __init__(self, *, gate_proj: nn.Module, up_proj: nn.Module, down_proj: nn.Module) -> None:
        super().__init__()
        self.gate_proj = gate_proj
        self.up_proj = up_proj
        self.down_proj = down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., embed_dim) -> (..., embed_dim)."""
        gate, up = self.gate_proj(x), self.up_proj(x)  # (..., hidden_dim) each
        needs_grad = torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad)
        if needs_grad and self.lean_backward and not torch.compiler.is_compiling():
            down = self.down_proj
            if type(down) is nn.Linear and down.weight.requires_grad and not _is_dtensor(down.weight):
                # A trained plain projection: its input, the product, is recomputed in backward too.
                # (A tensor-parallel one runs through its module: its hooks redistribute the input.)
                return _SiluMulLinear.apply(gate, up, down.weight, down.bias)
            return down(_SiluMul.apply(gate, up))
        return self.down_proj(F.silu(gate) * up)


def _is_dtensor(weight: torch.Tensor) -> bool:
    return isinstance(weight, DTensor)


class _SiluMul(torch.autograd.Function):
    """``silu(gate) * up`` that saves only ``gate`` and ``up`` for backward.

    Left to autograd, the product also saves ``silu(gate)``, a third tensor of the hidden width
    (the largest activations of the layer); here it is recomputed in backward. Forward and
    backward run the plain expression's kernels, so outputs and gradients are bit for bit the
    same (tested).
    """

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(gate, up)
        return F.silu(gate).mul_(up)  # the product in silu's buffer: one hidden-width tensor, not two

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        gate, up = ctx.saved_tensors
        return _silu_mul_grads(grad, gate, up, F.silu(gate), ctx.needs_input_grad, grad_is_ours=False)


class _SiluMulLinear(torch.autograd.Function):
    """``F.linear(silu(gate) * up, weight, bias)`` that saves only ``gate`` and ``up`` (and the weight).

    A trained down projection needs its input, the product, for its weight gradient; autograd
    would keep it (a third tensor of the hidden width). Here backward recomputes it from ``gate``
    and ``up``, one elementwise product. The products run the kernels of ``nn.Linear``'s autograd
    on the same 2-D views, so outputs and gradients are bit for bit the plain expression's (tested).
    """

    @staticmethod
    def forward(
        ctx: Any, gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        ctx.save_for_backward(gate, up, weight)
        ctx.has_bias = bias is not None
        return F.linear(F.silu(gate).mul_(up), weight, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        gate, up, weight = ctx.saved_tensors
        silu = F.silu(gate)
        rows = grad.reshape(-1, grad.shape[-1])  # (tokens, out)
        grad_weight = grad_bias = None
        if ctx.needs_input_grad[2]:
            grad_weight = rows.t().mm((silu * up).reshape(-1, up.shape[-1]))
        if ctx.has_bias and ctx.needs_input_grad[3]:
            grad_bias = rows.sum(0)
        grad_product = grad.matmul(weight)  # (..., hidden), this function's own buffer
        grad_gate, grad_up = _silu_mul_grads(
            grad_product, gate, up, silu, ctx.needs_input_grad, grad_is_ours=True
        )
        return grad_gate, grad_up, grad_weight, grad_bias


def _silu_mul_grads(  # noqa: PLR0913 - the saved tensors and what backward needs
    grad: torch.Tensor,
    gate: torch.Tensor,
    up: torch.Tensor,
    silu: torch.Tensor,
    needs: tuple[bool, ...],
    *,
    grad_is_ours: bool,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The gradients of ``silu(gate) * up`` with respect to ``gate`` and ``up``, given ``grad`` of the product.

    The kernels autograd runs for the plain expression, in the same order: identical gradients. They
    run in place where a buffer is done with (``silu``, which the caller computed for this and reads
    no more; ``grad`` too when ``grad_is_ours``): each hidden-width allocation costs page faults on
    CPU (fresh memory), about as much as the product itself.
    """
    grad_up = silu.mul_(grad) if needs[1] else None
    grad_gate = None
    if needs[0]:
        scaled = grad.mul_(up) if grad_is_ours else grad * up
        grad_gate = torch.ops.aten.silu_backward.grad_input(scaled, gate, grad_input=scaled)
    return grad_gate, grad_up
