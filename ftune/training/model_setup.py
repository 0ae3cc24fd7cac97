"""Build the model a recipe trains: on the meta device, then weights assigned straight from the checkpoint.

Building on the meta device allocates nothing, and loading with ``assign=True`` hands the
checkpoint's (memory-mapped) tensors to the model, so an 8B model never exists twice in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from ftune.checkpointing.model_fit import load_into
from ftune.config import instantiate
from ftune.runtime.device import default_dtype


def _cast(state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    # Only floating tensors take the training dtype; a same-dtype .to() is free (no copy).
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}


def build_model(
    node: Any, state: Mapping[str, torch.Tensor], *, device: torch.device, dtype: torch.dtype
) -> nn.Module:
    """Instantiate the config's model on the meta device and load `state` into it, strictly.

    Args:
        node: the config's ``model`` section (a `_component_` builder).
        state: the model weights in ftune names (``Loaded.model`` from a checkpointer).
        device: where the model trains.
        dtype: the parameter dtype (floating tensors of `state` are cast to it).

    Returns:
        The loaded model on `device`, in train mode.

    Raises:
        ValueError: when the checkpoint does not fit the model (names the tensors and shapes).
    """
    with default_dtype(dtype), torch.device("meta"):
        model = instantiate(node, _path="model")
    load_into(model, _cast(state, dtype))
    return model.to(device).train()


def apply_peft(
    node: Any, model: nn.Module, adapter: Mapping[str, torch.Tensor] | None, *, dtype: torch.dtype
) -> dict[str, Any]:
    """Swap adapters into a loaded model (the config's ``peft`` section), then load saved adapter weights.

    The swap happens after the base weights are real, so QLoRA can quantize them to NF4.

    Args:
        node: the config's ``peft`` section, e.g. ``{_component_: ftune.peft.apply_lora, rank: 8, ...}``.
        model: the loaded base model.
        adapter: adapter weights to resume from (ftune names), or None on a fresh run.
        dtype: dtype for the loaded adapter tensors.

    Returns:
        The peft settings (the section's arguments), for the checkpointer's adapter_config.json.

    Raises:
        ValueError: when a saved adapter does not match the swapped layers.
    """
    instantiate(node, model, _path="peft")
    if adapter is not None:
        result = model.load_state_dict(_cast(adapter, dtype), strict=False)
        expected = {k for k in model.state_dict() if ".lora_" in k or k.endswith(".magnitude")}
        missing = sorted(expected - set(adapter))
        if result.unexpected_keys or missing:
            raise ValueError(
                f"the saved adapter does not fit the peft section: unexpected {result.unexpected_keys[:5]}, "
                f"missing {missing[:5]}. Resume with the same peft.targets and peft.rank as the run that saved it."
            )
    settings = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    return {k: v for k, v in settings.items() if k != "_component_"}
