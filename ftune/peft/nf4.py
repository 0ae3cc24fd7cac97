"""NF4 storage for frozen base weights (QLoRA), on top of torchao's NF4Tensor.

A quantized base weight stays a `weight` Parameter of the adapter module (so checkpoints keep their
keys), holds 4-bit codes plus double-quantized block scales, and is dequantized block by block inside
each matmul. torchao is imported lazily: a process that never quantizes never pays for its import.
"""

import math
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor

# Block sizes of the QLoRA paper (and torchao's defaults): 64 weights share one absmax scale, and
# 256 scales are themselves quantized to int8 as a group ("double quantization").
NF4_BLOCK_SIZE = 64
NF4_SCALER_BLOCK_SIZE = 256
# FSDP2 shards an NF4 weight by rows, each rank taking whole groups of scales, so a weight shards over
# N ranks only if its number of scale groups divides by N: the scaler block size shrinks (by halves)
# until the groups divide by this, so that QLoRA shards over 2, 4 or 8 ranks (see `scaler_block_size`).
NF4_SHARDABLE_GROUPS = 8

_NF4_MODULES = (
    "torchao.quantization.quantize_.workflows.nf4.nf4_tensor",  # torchao >= 0.15
    "torchao.dtypes.nf4tensor",  # older torchao
)


def _nf4_module():
    """The torchao module that defines NF4Tensor, to_nf4 and linear_nf4 (imported on first use)."""
    errors = []
    for name in _NF4_MODULES:
        try:
            return __import__(name, fromlist=["NF4Tensor"])
        except ImportError as e:
            errors.append(f"{name}: {e}")
    raise ImportError(
        "QLoRA (quantize_base=True) needs torchao's NF4Tensor, but none of these imports worked: "
        + "; ".join(errors)
        + ". Install torchao>=0.12 (`pip install torchao`)."
    )


# The NF4Tensor classes seen so far in sys.modules (see is_nf4).
_NF4_TYPES: list[type] = []


def is_nf4(tensor: torch.Tensor | None) -> bool:
    """True when `tensor` is a torchao NF4Tensor (also wrapped as an nn.Parameter, or a rank's shard of
    one inside an FSDP2 DTensor)."""
    if isinstance(tensor, DTensor):
        tensor = tensor._local_tensor  # not to_local(): no autograd view of the shard is needed here
    # An NF4Tensor can only exist once torchao's module is imported, so checking sys.modules first
    # keeps plain LoRA free of the (slow) torchao import. Only in eager code, though: traced by
    # torch.compile (LoRALinear.forward calls this), reading sys.modules makes dynamo guard on the
    # length of sys.modules, so any later import anywhere recompiles every compiled layer. Compiled
    # code checks the classes an eager call (the layer's constructor, at the latest) recorded.
    if not torch.compiler.is_compiling():
        for name in _NF4_MODULES:
            module = sys.modules.get(name)
            if module is not None and module.NF4Tensor not in _NF4_TYPES:
                _NF4_TYPES.append(module.NF4Tensor)
    return any(isinstance(tensor, cls) for cls in _NF4_TYPES)


def check_nf4_shape(weight: torch.Tensor, *, name: str = "weight") -> None:
    """Raise ValueError unless `weight` is 2-D with a multiple of 64 elements (NF4's block size)."""
    if weight.dim() != 2 or weight.numel() % NF4_BLOCK_SIZE:
        raise ValueError(
            f"Cannot quantize {name} to NF4: shape {tuple(weight.shape)} is not a 2-D weight whose number "
            f"of elements is a multiple of {NF4_BLOCK_SIZE}. Leave this layer out of the LoRA targets or "
            "set quantize_base=False."
        )


def to_nf4_parameter(weight: torch.Tensor, *, name: str = "weight") -> nn.Parameter:
    """Quantize a 2-D weight to NF4 and wrap it as a frozen Parameter.

    The scaler block size drops below 256 where the weight is too small or oddly sized for groups
    of 256 scales that also shard over 8 ranks (`scaler_block_size`); real layer sizes use the
    standard 64/256 blocks.

    Args:
        weight: dense weight, shape [out_features, in_features], any float dtype, device or meta.
        name: the weight's module path, used in error messages only.

    Returns:
        A Parameter holding an NF4Tensor whose `dtype` is `weight.dtype` (the dequantized dtype),
        with requires_grad False.

    Raises:
        ValueError: if the weight is not 2-D or its size is not a multiple of 64.
    """
    check_nf4_shape(weight, name=name)
    scalers = scaler_block_size(weight.numel() // NF4_BLOCK_SIZE)
    with torch.no_grad():
        quantized = _nf4_module().to_nf4(weight.detach().contiguous(), NF4_BLOCK_SIZE, scalers)
    return nn.Parameter(quantized, requires_grad=False)


def scaler_block_size(n_blocks: int) -> int:
    """How many block scales share one double-quantization factor, for a weight of `n_blocks` blocks.

    256 (the QLoRA paper's) where it divides `n_blocks` and leaves a number of groups that divides by
    NF4_SHARDABLE_GROUPS; otherwise the largest power of two below it that does (or 1). Real layer sizes
    (multiples of 512 rows and columns) keep 256; SmolLM2-135M's 576-wide layers and tiny test models
    get smaller groups, which quantize the scales a little more finely and let FSDP2 shard them.
    """
    size = math.gcd(n_blocks, NF4_SCALER_BLOCK_SIZE)
    while size > 1 and (n_blocks // size) % NF4_SHARDABLE_GROUPS:
        size //= 2
    return size


def dequantize(weight: torch.Tensor) -> torch.Tensor:
    """Dense copy of an NF4 weight in its original dtype; any other tensor is returned as is.

    An FSDP2-sharded NF4 weight (a DTensor over NF4 shards) gives a DTensor over dense shards: each
    rank's rows hold their own codes and scales, so each rank dequantizes its rows alone, and
    gathering the result (e.g. a full state dict) moves dense rows.
    """
    if isinstance(weight, DTensor) and is_nf4(weight):
        local = weight._local_tensor.get_original_weight()
        return DTensor.from_local(
            local, weight.device_mesh, weight.placements, shape=weight.shape, stride=weight.stride()
        )
    if is_nf4(weight):
        return weight.get_original_weight()
    return weight


def frozen_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y = x·Wᵀ + b for a frozen (requires_grad False) weight, dense or NF4.

    Autograd computes no weight gradient for a weight that does not require grad, so the backward of
    the frozen base matmul is a single matmul (the input gradient). For NF4, torchao's autograd
    function saves only the 4-bit weight for backward and dequantizes it again there, so no dense
    copy of the weight outlives the forward.

    Args:
        x: input, shape [..., in_features].
        weight: [out_features, in_features], dense or NF4Tensor.
        bias: [out_features] or None.

    Returns:
        Output of shape [..., out_features].
    """
    if is_nf4(weight):
        out = _nf4_module().linear_nf4(x, weight)
        return out if bias is None else out + bias
    return F.linear(x, weight, bias)
