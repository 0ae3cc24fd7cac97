"""Fold adapters into their base weights, in place or into a base-format state dict."""

import torch
from torch import nn

from ftune.peft.adapter_state import adapter_layers, adapter_state_dict


def merge_adapters(model: nn.Module) -> nn.Module:
    """Replace every LoRA / DoRA layer by a plain nn.Linear holding its merged weight, in place.

    The merged model computes the same logits as the adapted one (up to float rounding) and has the
    base model's structure and state-dict keys. QLoRA layers merge into a dense weight in the dtype the
    base weight had before quantization. Merged parameters are frozen (requires_grad False), like the
    base weights they replace.

    Args:
        model: a model adapted with `apply_lora`.

    Returns:
        The same model object, for chaining.
    """
    for fqn, layer in adapter_layers(model).items():
        merged = layer.merged_weight()
        # Build on the meta device: no throwaway random init of a weight we overwrite anyway.
        linear = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None, device="meta")
        linear.weight = nn.Parameter(merged, requires_grad=False)
        if layer.bias is not None:
            linear.bias = layer.bias
        parent_fqn, _, name = fqn.rpartition(".")
        setattr(model.get_submodule(parent_fqn), name, linear)
    return model


def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The base-format state dict of the merged model, without changing `model`.

    Args:
        model: a model adapted with `apply_lora` (plain models are returned as their state_dict()).

    Returns:
        The model's state_dict() with each adapted layer's `weight` replaced by its merged weight (a
        new tensor; other entries share storage with the model, as state_dict() does) and without
        adapter keys: the key set of the model before apply_lora.
    """
    state = model.state_dict()
    for key in adapter_state_dict(model):
        del state[key]
    for fqn, layer in adapter_layers(model).items():
        state[f"{fqn}.weight" if fqn else "weight"] = layer.merged_weight()
    return state
