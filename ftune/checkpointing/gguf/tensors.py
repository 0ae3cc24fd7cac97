"""GGUF tensor data: which GGML types ftune can read, and their dequantization to float32.

The block arithmetic is the `gguf` package's (llama.cpp's own reader), which is also what
`transformers` uses when it loads a GGUF.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
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


def dequantized_state_dict(
    tensors: Mapping[str, Any],
    config: Mapping[str, Any],
    *,
    key_of: Callable[[str], str],
    adjust: Callable[[str, torch.Tensor], torch.Tensor],
    layer_names: Iterable[str],
    global_names: Mapping[str, str],
    family: str,
    dtype: torch.dtype,
    source: str | os.PathLike,
) -> dict[str, torch.Tensor]:
    """Dequantize every tensor (GGUF name -> `GGUFReader` tensor) into an HF-keyed `dtype` state dict.

    Args:
        tensors: the file's tensors by GGUF name.
        config: the file's HF config (layer count, tied embeddings).
        key_of: GGUF name -> HF key (raises on an unknown name).
        adjust: the family's fix-up of a dequantized float32 tensor (e.g. q/k row order), by GGUF name.
        layer_names: the HF names (without ``model.layers.<i>.`` and ``.weight``) every layer must have.
        global_names: GGUF name -> HF key of the tensors outside the layers.
        family: the architecture's name, for the message.
        dtype: the dtype of the returned tensors.
        source: the file, for messages.

    Raises:
        ValueError: a tensor whose data does not have its declared shape, or a set of tensors that
            is not a whole model of ``config["num_hidden_layers"]`` layers.
    """
    state_dict = {}
    for name, t in tensors.items():
        key = key_of(name)
        value = dequantize(t.data, t.tensor_type)
        if tuple(value.shape) != (shape := tuple(int(d) for d in reversed(t.shape))):
            raise ValueError(f"{source}: tensor {name!r} dequantized to {tuple(value.shape)}, not {shape}.")
        state_dict[key] = adjust(name, value).to(dtype).contiguous()
    layers = config["num_hidden_layers"]
    expected = {f"model.layers.{i}.{v}.weight" for i in range(layers) for v in layer_names}
    expected |= {
        v for k, v in global_names.items() if k != "output.weight" or not config["tie_word_embeddings"]
    }
    missing, extra = sorted(expected - state_dict.keys()), sorted(state_dict.keys() - expected)
    if missing or extra:
        raise ValueError(
            f"{source}: the tensors do not form a {layers}-layer {family} model (block_count): missing "
            f"{missing[:3]}, unexpected {extra[:3]} (HF names). The file is truncated or inconsistent."
        )
    return state_dict


def gguf_float(value: float) -> float:
    """A float GGUF stores as float32 (1e-5 reads back as 9.999999747378752e-06), as the shortest
    decimal that is the same float32, which is what the model's own config.json holds."""
    return float(np.format_float_positional(np.float32(value), unique=True, trim="0"))
