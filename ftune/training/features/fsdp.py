"""FSDP2 sharding of a decoder: each layer its own unit, then the root. An image-text model's
vision encoder layers and its projector are units too (the embeddings and norms belong to the root).

The step's loss is normalised by the token count of the whole global batch (all ranks, all
micro-batches), so each rank's gradient is its share of the global mean and the ranks'
gradients must be summed. FSDP2 averages them (and gloo cannot run the pre-multiplied sum
that changing FSDP's divide factor needs), so `StepLoss.scaled` scales each rank's loss by the world
size instead: the average of the scaled gradients is exactly the sum.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    fully_shard,
    register_fsdp_forward_method,
)
from torch.distributed.tensor import DTensor

from ftune.modules.vision import ImageTextModel
from ftune.peft.nf4 import is_nf4
from ftune.runtime.mesh import ParallelMesh
from ftune.runtime.rank import world_size
from ftune.training.features.context_parallel import context_parallel
from ftune.training.features.layers import block_layers
from ftune.training.features.tensor_parallel import tensor_parallel


def is_sharded(model: nn.Module) -> bool:
    """True when `model` was sharded with `shard_model` (FSDP2)."""
    return isinstance(model, FSDPModule)


def shard_model(
    model: nn.Module,
    reshard_after_forward: bool = True,
    cpu_offload: bool = False,
    *,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = None,
    mesh: ParallelMesh | None = None,
) -> nn.Module:
    """Shard `model` in place with FSDP2: every decoder layer (and an image-text model's every
    vision encoder layer), then the root.

    With an image-text model every rank must run the same units in each forward and backward,
    whatever images its micro-batch holds: over several ranks the model encodes a blank image for a
    batch without any, adding zero (`ImageTextModel.encode_without_images`), and units whose
    parameters got no gradient on a rank (Llama 3.2 Vision's cross-attention layers skip a text-only
    batch) reduce zeros (FSDP2's `set_reduce_scatter_unused_params`).

    QLoRA: an NF4 base weight (torchao's NF4Tensor) shards like a dense one, by rows: each rank keeps
    its rows' 4-bit codes, block scales and scale-group factors, and FSDP2 gathers those (not dense
    weights) before each layer's forward and backward. Every rank quantized the same weight from the
    full base checkpoint before this, so the shards are the single-device weight's rows. A world of
    one leaves NF4 weights out of FSDP2 (nothing to shard).

    Args:
        model: a TransformerDecoder (anything with `.layers`) or an `ImageTextModel`, on its device, adapters and fake
            quantization already applied, activation checkpointing already wrapped.
        reshard_after_forward: free each layer's gathered parameters after its forward (less
            memory, one more all-gather in backward). The root keeps its own gathered (the loss
            uses the output projection right after the forward).
        cpu_offload: keep sharded parameters, gradients and optimizer state on CPU (a GPU run's
            option; on a CPU run they are there already, so it changes nothing).
        param_dtype: compute dtype of the gathered parameters (bf16 mixed precision); None keeps
            the parameters' dtype.
        reduce_dtype: dtype of the gradient reduction; None keeps the gradients' dtype.
        mesh: the run's device mesh (`ftune.runtime.mesh.device_mesh`): with tensor parallel, the
            layers' projections are split over its ``tp`` ranks first and FSDP2 shards over ``dp``;
            with context parallel FSDP2 shards over ``dp`` and ``cp``. None: FSDP2 over every rank.

    Returns:
        The same model, now an FSDPModule.

    Raises:
        ValueError: for a QLoRA model that cannot shard over this world size (rows or scale groups
            of an NF4 weight that do not divide by it), or with a param_dtype other than the NF4
            weights' dtype (torchao's NF4 all-gather has no mixed precision).
    """
    ranks = world_size()
    _check_nf4_shardable(model, ranks, param_dtype)
    if mesh is not None and mesh.tp > 1:
        tensor_parallel(model, mesh.tp_mesh)
    if mesh is not None and mesh.cp > 1:
        context_parallel(model, mesh.cp_group)
    kwargs = {
        "mesh": None if mesh is None else mesh.fsdp_mesh,  # None: a 1-D mesh over every rank
        "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype),
    }
    if ranks == 1 and (nf4 := {p for p in model.parameters() if is_nf4(p)}):
        # A world of one has nothing to shard, and FSDP2's shortcut for it copies one tensor per
        # parameter, not NF4's three (codes, scales, factors): leave the NF4 weights unmanaged.
        kwargs["ignored_params"] = nf4
    on_cpu = next(model.parameters()).device.type == "cpu"
    if cpu_offload and not on_cpu:  # on a CPU-only run the parameters are on the CPU already
        kwargs["offload_policy"] = CPUOffloadPolicy()
    whole = {**kwargs, "mesh": mesh.mesh} if mesh is not None and mesh.tp > 1 else kwargs
    for layer in block_layers(model, feature="shard_model"):
        if whole is not kwargs:
            _shard_whole_parts(layer, reshard_after_forward, whole)
        fully_shard(layer, reshard_after_forward=reshard_after_forward, **kwargs)
    image_text = isinstance(model, ImageTextModel)
    if image_text:  # its own unit: gathered for the images only, freed after them
        fully_shard(model.projector, reshard_after_forward=reshard_after_forward, **whole)
    fully_shard(model, reshard_after_forward=False, **whole)
    if image_text and ranks > 1:
        model.encode_without_images = True
        model.set_reduce_scatter_unused_params(True)
    # The recipes run `model.hidden(...)` (the loss projects in chunks), not `model(...)`.
    register_fsdp_forward_method(model, "hidden")
    return model


def _shard_whole_parts(layer: nn.Module, reshard_after_forward: bool, kwargs: dict) -> None:
    """Beside tensor parallel: each sub-module of `layer` that holds parameters tensor parallel left
    whole (norms) becomes its own unit, sharded like the root (embeddings, final norm, output) over the
    tp ranks and replicated over dp (HSDP on the dp x tp mesh). Every parameter then lives on the one
    2-D mesh, which the gradient-norm clipping's sum over all gradients needs; and the average over
    all ranks is the average over dp, the tp ranks' gradients of these parts being equal."""
    for module in layer.modules():
        own = list(module.parameters(recurse=False))
        if module is not layer and own and not any(isinstance(p, DTensor) for p in own):
            fully_shard(module, reshard_after_forward=reshard_after_forward, **kwargs)


def _check_nf4_shardable(model: nn.Module, ranks: int, param_dtype: torch.dtype | None) -> None:
    """Refuse, before sharding anything, the NF4 weights FSDP2 cannot split into `ranks` row shards."""
    nf4 = [(n, p) for n, p in model.named_parameters() if is_nf4(p)]
    if not nf4:
        return
    if param_dtype not in (None, nf4[0][1].dtype):
        raise ValueError(
            f"FSDP2 cannot shard NF4-quantized base weights (QLoRA) with param_dtype={param_dtype}: "
            f"torchao's NF4 all-gather keeps the weights' own dtype ({nf4[0][1].dtype}, e.g. {nf4[0][0]}). "
            "Shard without param_dtype (set the model's dtype instead), or set peft.quantize_base=false."
        )
    for name, p in nf4:
        rows, groups = p.shape[0], p.quantization_factor.numel()
        if rows % ranks or groups % ranks:
            raise ValueError(
                f"FSDP2 cannot shard NF4-quantized base weights (QLoRA) over {ranks} ranks: {name} "
                f"(shape {tuple(p.shape)}) has {rows} rows and {groups} groups of block scales, and each "
                f"rank must hold whole rows and whole groups (both must divide by {ranks}). Run on a "
                "number of processes that divides both (--nproc_per_node), leave this layer out of "
                "peft.targets, or set peft.quantize_base=false."
            )


def all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks in place (no-op without a process group); returns it."""
    if world_size() > 1:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def all_reduce_max(value: torch.Tensor) -> torch.Tensor:
    """The elementwise maximum of a tensor over ranks, in place (no-op without a process group); returns it."""
    if world_size() > 1:
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value
