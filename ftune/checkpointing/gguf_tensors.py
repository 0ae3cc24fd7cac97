"""GGUF tensor data: which GGML types ftune can read, and their dequantization to float32.

The block arithmetic is the `gguf` package's (llama.cpp's own reader), which is also what
`transformers` uses when it loads a GGUF.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import gguf
import numpy as np
import torch

GGMLType = gguf.GGMLQuantizationType
_FLOAT_TYPES = {GGMLType.F32: torch.float32, GGMLType.F16: torch.float16, GGMLType.BF16: torch.bfloat16}


def check_tensor_types(tensors: Iterable[Any], *, source: str | os.PathLike) -> None:
    """Raise a ValueError naming the first tensor whose GGML type cannot be dequantized."""
    for t in tensors:
        if not can_dequantize(t.tensor_type):
            accepted = ", ".join(q.name for q in GGMLType if can_dequantize(q))
            raise ValueError(
                f"{source}: tensor {t.name!r} is stored as {t.tensor_type.name}, which convert_gguf cannot "
                f"dequantize. Supported types: {accepted}. Re-quantize the file with llama.cpp's "
                "llama-quantize to one of them (e.g. Q8_0), or convert the original checkpoint."
            )


def can_dequantize(qtype: GGMLType) -> bool:
    """Whether `dequantize` handles `qtype` (asks gguf.quants with one block of zeros)."""
    if qtype in _FLOAT_TYPES:
        return True
    sizes = gguf.GGML_QUANT_SIZES.get(qtype)
    if sizes is None:
        return False
    try:
        gguf.quants.dequantize(np.zeros((1, sizes[1]), dtype=np.uint8), qtype)
    except NotImplementedError:
        return False
    return True


def dequantize(data: np.ndarray, qtype: GGMLType) -> torch.Tensor:
    """Dequantize the raw data of one GGUF tensor to float32.

    Args:
        data: what `GGUFReader` gives as `tensor.data`: the values for F32/F16 ([rows, cols]), the
            bytes for other types ([rows, bytes_per_row], whole blocks of the type per row).
        qtype: the tensor's GGML type.

    Returns:
        float32 tensor [rows, cols] (row-major, as HF stores a Linear weight [out, in]).
    """
    # A plain ndarray view of the memmap: numpy's memmap subclass makes every block slice slow.
    values = gguf.quants.dequantize(np.asarray(data), qtype)
    if not values.flags.writeable:  # F32 comes back as a view of the read-only file
        values = values.copy()
    return torch.from_numpy(values)
