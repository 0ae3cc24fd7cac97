"""AdamW whose moment estimates are stored in bfloat16: half the optimizer-state memory of fp32 AdamW.

The parameters (and their update) stay in their own dtype; only `exp_avg` and `exp_avg_sq` are
kept in bf16 between steps. Each step reads them into fp32, does the ordinary AdamW update in
fp32 and writes them back rounded to bf16, so the arithmetic is AdamW's and only the stored
moments lose precision (bf16 keeps 8 bits of mantissa, fp32's exponent range, so the second
moment, which spans many decades, cannot underflow the way an fp16 state would).

torchao's 8-bit and 4-bit AdamW (`torchao.optim.AdamW8bit`, `torchao.optim.AdamW4bit`) go
further with block-wise quantized states; they are used directly as the optimizer component.
The state here is made of plain tensors, so it saves in `recipe_state.pt` and loads with
`weights_only=True` like torch's own AdamW.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import Optimizer


class AdamWBf16State(Optimizer):
    """AdamW (decoupled weight decay, bias-corrected moments) with bf16 moment storage.

    Args:
        params: the parameters to train (or parameter groups).
        lr: learning rate.
        betas: decay rates of the first and second moment.
        eps: added to the square root of the second moment.
        weight_decay: decoupled weight decay (multiplied by lr, as in torch.optim.AdamW).

    Raises:
        ValueError: for a negative lr, eps or weight_decay, or betas outside [0, 1).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0:
            raise ValueError(
                f"AdamWBf16State: lr ({lr}), eps ({eps}) and weight_decay ({weight_decay}) must be >= 0."
            )
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"AdamWBf16State: betas must be in [0, 1), got {tuple(betas)}.")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    # step as a float tensor, like torch's AdamW, so state dicts look alike
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, dtype=torch.bfloat16)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.bfloat16)
                state["step"] += 1
                t = state["step"].item()
                grad = p.grad.float()
                exp_avg = state["exp_avg"].float().lerp_(grad, 1 - beta1)
                exp_avg_sq = state["exp_avg_sq"].float().mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                state["exp_avg"].copy_(exp_avg)  # rounded to bf16 (round-to-nearest-even)
                state["exp_avg_sq"].copy_(exp_avg_sq)
                denom = (exp_avg_sq / (1 - beta2**t)).sqrt_().add_(eps)
                update = (exp_avg / (1 - beta1**t)) / denom
                p32 = p.float().mul_(1 - lr * wd).sub_(update, alpha=lr)
                p.copy_(p32)
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # torch's Optimizer.load_state_dict casts floating state to each parameter's dtype; put the
        # moments back in bf16 (bf16 -> fp32 -> bf16 is exact, so a resumed run continues bit for bit).
        super().load_state_dict(state_dict)
        for state in self.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key] = state[key].to(torch.bfloat16)


def _tensor_bytes(t: torch.Tensor) -> int:
    # A tensor subclass (torchao's quantized states) stores its data in inner tensors: count those.
    if type(t) is not torch.Tensor and hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return sum(_tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def optimizer_state_bytes(optimizer: Optimizer) -> int:
    """Bytes held by an optimizer's per-parameter state (moments, step counters, quantization scales).

    Quantized states (torchao's `OptimState8bit`/`OptimState4bit`) count their codes, scales and
    code maps, i.e. what they really occupy, not the numel x 4 bytes their logical shape suggests.

    Args:
        optimizer: an optimizer that has stepped at least once (state is created lazily).

    Returns:
        The total in bytes.
    """
    return sum(
        _tensor_bytes(v)
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    )
