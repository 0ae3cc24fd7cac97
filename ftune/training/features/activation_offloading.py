"""Activation offloading: each decoder layer's saved activations wait in CPU memory between forward and backward.

Autograd keeps, for every op, the tensors its backward needs ("saved tensors"). A
`torch.autograd.graph.saved_tensors_hooks` pair sees each one as it is saved (pack) and when
backward asks for it (unpack). Here pack copies a GPU activation into pinned CPU memory on a side
CUDA stream (so the copy overlaps the next kernels and the GPU copy can be freed), and unpack
copies it back, again on the side stream, making the compute stream wait for it.

A layer's parameters and buffers are never offloaded (they stay resident anyway), nor tensors under `min_bytes` (the
copy's fixed cost outweighs the memory).

With activation checkpointing, a checkpointed layer keeps only its input (torch's non-reentrant
checkpoint saves the inputs with `save_for_backward` outside its own hooks); the offload hooks
then move exactly that input to CPU, so the two combine: recompute in backward, and nothing per
layer left in GPU memory in between.

On a CPU run, activations already live in CPU memory: there is nothing to offload to, and
`apply_activation_offloading` refuses instead of silently doing nothing.
"""

from __future__ import annotations

import logging
import types
from typing import Any

import torch
from torch import nn

from ftune.training.features.layers import block_layers

logger = logging.getLogger(__name__)

MIN_BYTES = 1 << 20  # 1 MiB: smaller saved tensors stay on the GPU


class OffloadSavedTensors(torch.autograd.graph.saved_tensors_hooks):
    """Context manager: saved CUDA activations go to pinned CPU memory, and come back in backward.

    Args:
        param_storages: data pointers of the model's parameter storages (never offloaded).
        stream: the side CUDA stream that does the copies.
        min_bytes: tensors smaller than this stay where they are.
    """

    def __init__(
        self, param_storages: set[int], stream: torch.cuda.Stream, min_bytes: int = MIN_BYTES
    ) -> None:
        def pack(t: torch.Tensor) -> Any:
            if not offloadable(t, param_storages, min_bytes):
                return t
            compute = torch.cuda.current_stream(t.device)
            stream.wait_stream(compute)  # t is fully written before the copy starts
            with torch.cuda.stream(stream):
                cpu = torch.empty(t.shape, dtype=t.dtype, layout=t.layout, pin_memory=True)
                cpu.copy_(t, non_blocking=True)
            t.record_stream(stream)  # the allocator keeps t's memory until the copy has read it
            return (t.device, cpu)

        def unpack(packed: Any) -> torch.Tensor:
            if isinstance(packed, torch.Tensor):
                return packed
            device, cpu = packed
            compute = torch.cuda.current_stream(device)
            with torch.cuda.stream(stream):
                stream.wait_stream(compute)
                gpu = cpu.to(device, non_blocking=True)
            compute.wait_stream(stream)  # backward uses it only once it has arrived
            gpu.record_stream(compute)
            return gpu

        super().__init__(pack, unpack)


def offloadable(t: torch.Tensor, param_storages: set[int], min_bytes: int) -> bool:
    """Whether a saved tensor is moved to CPU: a CUDA tensor of at least `min_bytes`, not a parameter."""
    if t.device.type != "cuda" or t.numel() * t.element_size() < min_bytes:
        return False
    return t.untyped_storage().data_ptr() not in param_storages


def _offloaded_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    # Looked up at each call: under FSDP2 the layer's parameters are the all-gathered ones only now.
    resident = {t.untyped_storage().data_ptr() for t in (*self.parameters(), *self.buffers())}
    with OffloadSavedTensors(resident, self._offload_stream, self._offload_min_bytes):
        return self._offload_inner_forward(*args, **kwargs)


def apply_activation_offloading(model: nn.Module, device: torch.device, *, min_bytes: int = MIN_BYTES) -> int:
    """Offload the saved activations of each decoder layer to CPU memory (CUDA runs only).

    Apply it after `apply_activation_checkpointing` (then each layer's checkpointed input is what
    moves) and before `compile_model`. Parameter names and state-dict keys do not change.

    Args:
        model: a decoder with a ``layers`` ``nn.ModuleList``, on `device`.
        device: the run's device; must be CUDA.
        min_bytes: saved tensors smaller than this stay on the GPU.

    Returns:
        The number of layers newly offloaded (0 when applied twice).

    Raises:
        ValueError: on a non-CUDA device (nothing to offload to), or a model without ``layers``.
    """
    if device.type != "cuda":
        raise ValueError(
            f"activation_offloading=true moves saved activations from GPU memory to CPU memory, but this run's "
            f"device is {device.type!r}: its activations are already in CPU memory, so there is nothing to "
            "offload to. Set activation_offloading=false (on CPU, activation_checkpointing=true is the lever "
            "for activation memory), or run on a GPU with device=cuda."
        )
    layers = block_layers(model, feature="apply_activation_offloading")
    stream = torch.cuda.Stream(device)
    count = 0
    for layer in layers:
        forward = layer.__dict__.get("forward")
        if isinstance(forward, types.MethodType) and forward.__func__ is _offloaded_forward:
            continue
        # The forward in place (the class's, or the checkpointed one) runs inside the hooks.
        layer._offload_inner_forward = (
            forward if forward is not None else types.MethodType(type(layer).forward, layer)
        )
        layer._offload_min_bytes = min_bytes
        layer._offload_stream = stream
        layer.forward = types.MethodType(_offloaded_forward, layer)
        count += 1
    logger.info(
        "Activation offloading on %d of %d layers (saved tensors >= %d bytes)", count, len(layers), min_bytes
    )
    return count
