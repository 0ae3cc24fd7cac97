"""torch.compile for the model's decoder layers and for the loss, in place (no ``_orig_mod.`` keys).

Compiling layer by layer instead of the whole model keeps compile time flat in depth (all
layers share one compiled graph) and keeps the model's own Python (caches, masks) eager.
"""

import logging

import torch
from torch import nn

from ftune.training.features.layers import block_layers

logger = logging.getLogger(__name__)


def compile_model(model: nn.Module, *, dynamic: bool | None = None) -> None:
    """Compile each ``model.layers[i]`` in place with ``nn.Module.compile``.

    Module names and state-dict keys do not change. Call it after activation checkpointing and
    before FSDP sharding.

    Args:
        model: a decoder with a ``layers`` ``nn.ModuleList``, or an image-text model (its vision
            encoder's layers and its decoder's).
        dynamic: passed to ``torch.compile``; None lets it decide after a shape change.

    Raises:
        ValueError: if the model has no ``layers`` ``nn.ModuleList``.
    """
    layers = block_layers(model, feature="compile_model")
    for layer in layers:
        layer.compile(dynamic=dynamic)
    logger.info("Compiled %d decoder layers with torch.compile", len(layers))


def compile_loss(loss_fn: nn.Module, *, dynamic: bool | None = None) -> nn.Module:
    """Compile a loss in place and return it.

    ftune's losses compile their per-chunk ``chunk_loss`` (projection, fp32 upcast and
    cross-entropy fuse; the Python chunk loop stays eager). Other ``nn.Module`` losses are
    compiled whole.

    Args:
        loss_fn: a loss from ``ftune.training.step.loss`` or any ``nn.Module``.
        dynamic: passed to ``torch.compile``.

    Returns:
        The same object, compiled.

    Raises:
        TypeError: if ``loss_fn`` is neither.
    """
    if hasattr(loss_fn, "chunk_loss"):
        loss_fn.chunk_loss = torch.compile(loss_fn.chunk_loss, dynamic=dynamic)
    elif isinstance(loss_fn, nn.Module):
        loss_fn.compile(dynamic=dynamic)
    else:
        raise TypeError(
            f"compile_loss expects an nn.Module loss (e.g. ftune.training.ChunkedCrossEntropyLoss), "
            f"got {type(loss_fn).__name__}."
        )
    return loss_fn
