"""The run's optimizer: the config's, or one stepped inside backward (`optimizer_in_backward`).

Under FSDP2 every parameter is a DTensor, and a DTensor runs only the operators torch has a
sharding rule for. Some optimizer kernels have none in torch 2.13 (``SGD(fused=True)`` calls
``aten._fused_sgd_``, ``Adagrad(fused=True)`` ``aten._fused_adagrad_``), so such an optimizer dies
with a traceback at its first step on several ranks while it runs on one device. `sharded_step_problems`
finds that from the config alone: it steps the configured optimizer once on a plain tensor, records
the operators the step calls on it, and looks each up in DTensor's rule tables. `ftune run` (before
torchrun starts), `ftune validate` and `build_optimizer` on several ranks refuse such a config with
the setting to change.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

from ftune.config import instantiate
from ftune.config.errors import ConfigError
from ftune.runtime.rank import world_size
from ftune.training.features.optimizer_in_backward import OptimizerInBackward

# Options that choose the kernel an optimizer steps with: the ones a refusal may blame.
KERNEL_OPTIONS = ("fused", "foreach")
_PROBE_SHAPE = (3, 5)  # a shape no factory call of an optimizer's step makes by itself


def build_optimizer(
    node: Any, params: list[torch.nn.Parameter], *, in_backward: bool
) -> torch.optim.Optimizer:
    """The config's optimizer over `params`, or one optimizer per parameter stepped inside backward.

    Raises:
        ConfigError: on several ranks, an optimizer whose step FSDP2's sharded parameters cannot run.
    """
    if world_size() > 1 and (problems := sharded_step_problems(node)):
        raise ConfigError(problems)
    if not in_backward:
        return instantiate(node, params, _path="optimizer")
    if world_size() > 1:
        raise ValueError(
            "optimizer_in_backward=True is not supported with several ranks: FSDP reduces the gradients "
            "after backward, so stepping inside backward would use unreduced gradients. Set "
            "optimizer_in_backward=false (or run the single-device recipe)."
        )
    return OptimizerInBackward(params, lambda group: instantiate(node, group, _path="optimizer"))


class _ParameterOps(TorchDispatchMode):
    """Records the operators called with a tensor of the probe parameter's shape (the parameter, its
    gradient, its optimizer state): under FSDP2 those are the DTensors."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Any] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat = [*args, *kwargs.values()]
        flat = [t for a in flat for t in (a if isinstance(a, (list, tuple)) else [a])]
        if any(isinstance(t, torch.Tensor) and tuple(t.shape) == _PROBE_SHAPE for t in flat):
            self.ops.append(func)
        return func(*args, **kwargs)


def _has_sharding_rule(op: Any) -> bool:
    # DTensor's dispatcher looks an operator up in these tables (torch 2.13); an operator in none of
    # them raises "does not have a sharding strategy registered". tests/training/test_sharded_optimizer.py
    # checks this verdict against real FSDP2 steps at world size 2, so a torch that moves them fails there.
    dispatcher = DTensor._op_dispatcher
    propagator = dispatcher.sharding_propagator
    tables = (
        propagator.op_strategy_funcs,
        propagator.op_to_rules,
        propagator.op_single_dim_strategy_funcs,
        dispatcher._custom_op_handlers,
    )
    return any(op in table for table in tables)


def _unsharded_ops(node: Any) -> list[str]:
    """The operators one step of the optimizer `node` builds calls that DTensor has no rule for."""
    weight = torch.nn.Parameter(torch.zeros(_PROBE_SHAPE))
    weight.grad = torch.ones(_PROBE_SHAPE)
    try:
        optimizer = instantiate(node, [weight], _path="optimizer")
    except Exception:  # noqa: BLE001 - a node that does not build is reported where the recipe builds it
        return []
    with _ParameterOps() as recorded:
        optimizer.step()
        optimizer.step()  # a second step: some optimizers take another path once their state exists
    return sorted({str(op) for op in recorded.ops if not _has_sharding_rule(op)})


def sharded_step_problems(node: Any, where: Any = None) -> list[str]:
    """Why the optimizer `node` cannot step FSDP2's sharded parameters; no problems: it can.

    Args:
        node: the config's ``optimizer`` node (with its ``_component_``).
        where: ``key -> "file:line"`` (`Config.where`), to say where a blamed option is set.

    Returns:
        One message naming the operators, the option that chose them (``fused``/``foreach``) when
        unsetting it fixes the step, and the override to use; or [].
    """
    bad = _unsharded_ops(node)
    if not bad:
        return []
    component = node["_component_"]
    ops = ", ".join(bad)
    head = (
        f"its step calls {ops}, which FSDP2's sharded (DTensor) parameters cannot run in torch "
        f"{torch.__version__.split('+')[0]} (no sharding rule), so a distributed recipe would fail at its "
        "first optimizer step"
    )
    for option in KERNEL_OPTIONS:
        if node.get(option) is None or option not in node:
            continue
        without = {k: v for k, v in node.items() if k != option}
        if not _unsharded_ops(without):
            at = f" ({where(f'optimizer.{option}')})" if where else ""
            value = str(node[option]).lower() if isinstance(node[option], bool) else node[option]
            return [
                f"optimizer.{option}: {value}{at} with {component}: {head}. Accepted on several ranks: "
                f"{component} without {option}. Remove it with ~optimizer.{option} (or set "
                f"optimizer.{option}=false), or run the single-device recipe."
            ]
    return [
        f"optimizer._component_: {component}: {head}. Use an optimizer whose step shards, such as "
        "torch.optim.AdamW (optimizer=torch.optim.AdamW), or run the single-device recipe."
    ]
