"""Swap a config's adapters (LoRA, DoRA, QLoRA) into a loaded model, and load saved adapter weights on resume."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from ftune.checkpointing.model_build import cast_floating
from ftune.checkpointing.qat_ranges import is_range_key
from ftune.config import instantiate
from ftune.modules.score_head import ScoreHead


def apply_peft(
    node: Any, model: nn.Module, adapter: Mapping[str, torch.Tensor] | None, *, dtype: torch.dtype
) -> dict[str, Any]:
    """Swap adapters into a loaded model (the config's ``peft`` section), then load saved adapter weights.

    The swap happens after the base weights are real, so QLoRA can quantize them to NF4. A reward
    model's score head (``ftune.training.add_score_head``, before this call) trains with the adapters,
    as PEFT's ``modules_to_save`` of a SEQ_CLS adapter: it is new, so freezing it would train nothing useful.

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
    if ranges := [k for k, _ in model.named_parameters() if is_range_key(k)]:
        raise ValueError(
            f"peft: the model learns quantization ranges ({ranges[0]}: quantizer.learn_ranges=true), "
            "but a LoRA run trains its adapters only, so the ranges would stay at their min/max start "
            "and no checkpoint would keep them. Set quantizer.learn_ranges=false for QAT + LoRA."
        )
    instantiate(node, model, _path="peft")
    if isinstance(score := getattr(model, "score", None), ScoreHead):
        score.requires_grad_(True)
    if adapter is not None:
        result = model.load_state_dict(cast_floating(adapter, dtype), strict=False)
        expected = {k for k in model.state_dict() if ".lora_" in k or k.endswith(".magnitude")}
        missing = sorted(expected - set(adapter))
        if result.unexpected_keys or missing:
            raise ValueError(
                f"the saved adapter does not fit the peft section: unexpected {result.unexpected_keys[:5]}, "
                f"missing {missing[:5]}. Resume with the same peft.targets and peft.rank as the run that saved it."
            )
    settings = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    return {k: v for k, v in settings.items() if k != "_component_"}
