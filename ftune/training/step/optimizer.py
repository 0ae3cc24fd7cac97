"""The run's optimizer: the config's, or one stepped inside backward (`optimizer_in_backward`)."""

from __future__ import annotations

from typing import Any

import torch

from ftune.config import instantiate
from ftune.runtime.rank import world_size
from ftune.training.features.optimizer_in_backward import OptimizerInBackward


def build_optimizer(
    node: Any, params: list[torch.nn.Parameter], *, in_backward: bool
) -> torch.optim.Optimizer:
    """The config's optimizer over `params`, or one optimizer per parameter stepped inside backward."""
    if not in_backward:
        return instantiate(node, params, _path="optimizer")
    if world_size() > 1:
        raise ValueError(
            "optimizer_in_backward=True is not supported with several ranks: FSDP reduces the gradients "
            "after backward, so stepping inside backward would use unreduced gradients. Set "
            "optimizer_in_backward=false (or run the single-device recipe)."
        )
    return OptimizerInBackward(params, lambda group: instantiate(node, group, _path="optimizer"))
