"""Optimizer in backward: step each parameter as soon as its gradient is ready, then free the gradient.

Peak memory drops by the size of all gradients (only one parameter's gradient exists at a
time), at the price of gradient accumulation and clipping, which need every gradient at once.
"""

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn


class OptimizerInBackward(torch.optim.Optimizer):
    """One optimizer per parameter, stepped by a post-accumulate-grad hook during ``backward()``.

    It passes for a ``torch.optim.Optimizer`` where the training loop needs one: ``step()`` and
    ``zero_grad()`` are no-ops (the hooks already did both), and ``param_groups`` is the list of
    the inner optimizers' groups (the same dicts), so an LR scheduler built on this object sets
    the LR of every inner optimizer.

    Args:
        params: the parameters to train (those with ``requires_grad``).
        make_optimizer: builds an optimizer from a one-parameter list, e.g.
            ``functools.partial(torch.optim.AdamW, lr=1e-4)``.

    Raises:
        ValueError: if ``params`` is empty or holds param-group dicts.
    """

    def __init__(
        self,
        params: Iterable[nn.Parameter],
        make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    ) -> None:
        params = list(params)
        if not params or not all(isinstance(p, torch.Tensor) for p in params):
            raise ValueError(
                "OptimizerInBackward needs a non-empty iterable of parameters (no param-group dicts), got "
                f"{len(params)} item(s) of types {sorted({type(p).__name__ for p in params})}."
            )
        self._optimizers = [make_optimizer([p]) for p in params]
        super().__init__(params, defaults={})
        # Share the inner optimizers' group dicts, so LR changes reach them.
        self.param_groups = [group for opt in self._optimizers for group in opt.param_groups]
        self._handles = [
            p.register_post_accumulate_grad_hook(self._hook(opt)) for p, opt in zip(params, self._optimizers)
        ]

    @staticmethod
    def _hook(opt: torch.optim.Optimizer) -> Callable[[torch.Tensor], None]:
        def step_and_free(_: torch.Tensor) -> None:
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step_and_free

    def step(self, closure: Callable[[], float] | None = None) -> None:
        """No-op: every parameter was already stepped during ``backward()``."""
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """No-op: each gradient was freed right after its parameter's step."""

    def state_dict(self) -> dict[str, Any]:
        """State of every inner optimizer, in parameter order.

        Returns:
            ``{"optimizers": [inner.state_dict(), ...]}``.
        """
        return {"optimizers": [opt.state_dict() for opt in self._optimizers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned.

        Args:
            state_dict: ``{"optimizers": [...]}`` with one entry per parameter, in the same order.

        Raises:
            ValueError: if it is not such a dict, or the number of entries differs.
        """
        states = state_dict.get("optimizers") if isinstance(state_dict, dict) else None
        if not isinstance(states, list) or len(states) != len(self._optimizers):
            given = len(states) if isinstance(states, list) else f"keys {sorted(state_dict)}"
            raise ValueError(
                f"OptimizerInBackward.load_state_dict: expected {{'optimizers': [...]}} with "
                f"{len(self._optimizers)} entries (one per parameter), got {given}. Was the checkpoint "
                "saved with optimizer_in_backward and the same trainable parameters?"
            )
        for opt, state in zip(self._optimizers, states):
            opt.load_state_dict(state)
        # Optimizer.load_state_dict builds new group dicts: share those from now on.
        self.param_groups = [group for opt in self._optimizers for group in opt.param_groups]

    def remove_hooks(self) -> None:
        """Detach the backward hooks; gradients then accumulate normally again."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
