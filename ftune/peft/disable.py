"""Run a LoRA / DoRA model as its frozen base: the adapters switched off for the length of a block."""

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

from ftune.peft.lora import LoRALinear
from ftune.peft.moe_lora import LoRAGroupedExperts


@contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[int]:
    """Inside the block every LoRA / DoRA layer (and LoRA on MoE experts) computes its frozen base only.

    The model is the reference of DPO with adapters: no second copy of the weights is needed.
    The adapters are switched back on when the block ends, also on an error.

    Args:
        model: a model with adapters swapped in (``ftune.peft.apply_lora``), sharded or not.

    Yields:
        The number of adapter layers switched off.

    Raises:
        ValueError: if the model has no adapter layer.
    """
    layers = [m for m in model.modules() if isinstance(m, (LoRALinear, LoRAGroupedExperts))]
    if not layers:
        raise ValueError(
            f"adapters_disabled: {type(model).__name__} has no LoRA or DoRA layer; apply the peft section first."
        )
    for layer in layers:
        layer.adapter_enabled = False
    try:
        yield len(layers)
    finally:
        for layer in layers:
            layer.adapter_enabled = True
