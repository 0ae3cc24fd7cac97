"""Adapter state dicts: the trainable part of a LoRA / DoRA model, under ftune names."""

import torch
from torch import nn

from ftune.peft.dora import DoRALinear
from ftune.peft.lora import LoRALinear
from ftune.peft.moe_lora import expert_adapter_state_dict

# Key suffixes of adapter tensors in ftune state dicts.
ADAPTER_SUFFIXES = (".lora_a.weight", ".lora_b.weight", ".magnitude")


def is_adapter_key(key: str) -> bool:
    """True for ftune adapter keys such as `layers.0.attn.q_proj.lora_a.weight` or `....magnitude`."""
    return key.endswith(ADAPTER_SUFFIXES)


def adapter_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """The model's LoRA / DoRA layers by module path, in model order."""
    return {fqn: m for fqn, m in model.named_modules() if isinstance(m, LoRALinear)}


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Only the adapter tensors (lora_a, lora_b, magnitude; expert adapters too), detached, under ftune names.

    Args:
        model: a model adapted with `apply_lora` (unwrapped: no `_orig_mod.` or FSDP prefixes).

    Returns:
        {"layers.0.attn.q_proj.lora_a.weight": [rank, in], "....lora_b.weight": [out, rank],
        "....magnitude": [out] (DoRA only), ..., "layers.0.mlp.experts.lora.gate_up_proj.lora_a.weight":
        [E, rank, in], ...}; empty when the model has no adapter layers.
    """
    state = {}
    for fqn, layer in adapter_layers(model).items():
        prefix = f"{fqn}." if fqn else ""
        state[prefix + "lora_a.weight"] = layer.lora_a.weight.detach()
        state[prefix + "lora_b.weight"] = layer.lora_b.weight.detach()
        if isinstance(layer, DoRALinear):
            state[prefix + "magnitude"] = layer.magnitude.detach()
    state.update(expert_adapter_state_dict(model))
    return state
