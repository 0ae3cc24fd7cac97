"""Activation checkpointing of each decoder layer, without renaming any parameter.

``torch.distributed``'s ``checkpoint_wrapper`` inserts a wrapper module: the state dict hides
the ``_checkpoint_wrapped_module.`` prefix through hooks, but ``named_parameters()`` still shows
it (checked on torch 2.13), which breaks anything matching parameter names (LoRA, optimizer
state by name, FSDP wrapping policies). Here each layer keeps its class and its children; only
its ``forward`` is replaced, on the instance, by one that runs the class's ``forward`` under
``torch.utils.checkpoint``.
"""

import logging
import types
from typing import Any

from torch import nn
from torch.utils.checkpoint import checkpoint

from ftune.training.features.layers import block_layers

logger = logging.getLogger(__name__)


def _checkpointed_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    # Non-reentrant: works with keyword arguments, with inputs that do not require grad
    # (frozen embeddings under LoRA), and with torch.compile and FSDP2.
    return checkpoint(type(self).forward, self, *args, use_reentrant=False, **kwargs)


def _is_checkpointed(layer: nn.Module) -> bool:
    forward = layer.__dict__.get("forward")
    return isinstance(forward, types.MethodType) and forward.__func__ is _checkpointed_forward


def apply_activation_checkpointing(model: nn.Module) -> int:
    """Recompute each decoder layer's activations in backward instead of keeping them.

    Saves the activations inside every ``model.layers[i]`` at the cost of one extra forward of
    the layers. State-dict keys and parameter names do not change. Applying it twice is a no-op.
    Apply it before ``compile_model`` and before FSDP sharding.

    Args:
        model: a decoder with a ``layers`` ``nn.ModuleList``, or an image-text model (its vision
            encoder's layers and its decoder's).

    Returns:
        The number of layers newly checkpointed.

    Raises:
        ValueError: if the model has no ``layers`` ``nn.ModuleList``.
    """
    layers = block_layers(model, feature="apply_activation_checkpointing")
    count = 0
    for layer in layers:
        if _is_checkpointed(layer):
            continue
        # An instance attribute shadows the class's forward (nn.Module.__call__ looks it up on self).
        # A bound method, not a closure: copy.deepcopy rebinds it to the copy.
        layer.forward = types.MethodType(_checkpointed_forward, layer)
        count += 1
    logger.info("Activation checkpointing on %d of %d layers", count, len(layers))
    return count
