"""GGUF export, tensors: llama.cpp's names, its q/k row order, and the GGML type each tensor gets.

    FILE_TYPES["q8_0"]                                   # -> FileType(name, LlamaFileType, matrix type)
    gguf_tensors(hf_state, arch="llama", num_heads=.., num_kv_heads=..)   # HF names -> GGUF names
    encode(array, "blk.0.attn_q.weight", FILE_TYPES["q4_0"], tied=True)   # -> (data, GGML type)

Per-tensor choices follow llama.cpp. `convert_hf_to_gguf.py` keeps every 1-D tensor (norms, biases)
and every `*_norm.weight` in F32 and stores the matrices in the chosen type, falling back to F16 for
a matrix whose rows are not whole blocks of the type. A 4-bit file is what `llama-quantize` makes:
its Q4_0 keeps the output projection (the embedding when it is tied) in Q6_K; the `gguf` package
cannot write Q6_K (nor Q4_K, so no Q4_K_M here), so that tensor gets the next type up it can
write, Q8_0. The block arithmetic is `gguf.quants` (llama.cpp's own Python port).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import gguf
import numpy as np
import torch

from ftune.config.gguf_args import check_gguf_type
from ftune.models._meta_keys import to_meta_qk

logger = logging.getLogger(__name__)

GGMLType = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class FileType:
    """One `--type` of `ftune export gguf`.

    Attributes:
        name: the option's value (lower case, as llama.cpp's tools print it).
        file_type: `general.file_type` (llama.cpp's `llama_ftype`).
        matrix: the GGML type of the 2-D weights.
        output: the GGML type of the output projection (token_embd when tied), if it differs.
    """

    name: str
    file_type: gguf.LlamaFileType
    matrix: GGMLType
    output: GGMLType | None = None


FILE_TYPES: dict[str, FileType] = {
    "f32": FileType("f32", gguf.LlamaFileType.ALL_F32, GGMLType.F32),
    "f16": FileType("f16", gguf.LlamaFileType.MOSTLY_F16, GGMLType.F16),
    "bf16": FileType("bf16", gguf.LlamaFileType.MOSTLY_BF16, GGMLType.BF16),
    "q8_0": FileType("q8_0", gguf.LlamaFileType.MOSTLY_Q8_0, GGMLType.Q8_0),
    "q4_0": FileType("q4_0", gguf.LlamaFileType.MOSTLY_Q4_0, GGMLType.Q4_0, output=GGMLType.Q8_0),
}

# llama.cpp architecture name -> the gguf package's enum (for its HF -> GGUF tensor-name map).
_ARCHES = {name: arch for arch, name in gguf.MODEL_ARCH_NAMES.items()}


def lookup_file_type(name: str) -> FileType:
    """`FILE_TYPES[name]` (case-insensitive), or a ValueError listing the accepted names (`ftune export`
    checks the name before torch loads: ftune.config.gguf_args)."""
    return FILE_TYPES[check_gguf_type(name)]


def gguf_tensors(
    hf_state: Mapping[str, torch.Tensor], *, arch: str, num_heads: int, num_kv_heads: int, num_layers: int
) -> dict[str, torch.Tensor]:
    """An HF-named state dict under llama.cpp's tensor names, in llama.cpp's layout.

    `llama` files keep Meta's interleaved q/k rows (llama.cpp's converter permutes HF's q/k weights,
    and `ftune convert gguf` undoes it with `from_meta_qk`); `to_meta_qk` is that inverse. A tied
    `lm_head.weight` is left out (llama.cpp reuses token_embd). Gemma 3 norms hold `1 + weight`.

    Args:
        hf_state: HF keys -> tensors (`lm_head.weight` only when untied).
        arch: llama.cpp architecture ("llama", "qwen2", "qwen3", "gemma3").
        num_heads: query heads (q rows are permuted per head).
        num_kv_heads: key/value heads.
        num_layers: decoder layers (sizes the name map).

    Raises:
        KeyError: an HF key llama.cpp has no tensor for, named with the architecture.
    """
    names = gguf.get_tensor_name_map(_ARCHES[arch], num_layers)
    out = {}
    for key, value in hf_state.items():
        stem, dot, suffix = key.rpartition(".")
        name = names.get_name(stem)
        if name is None or suffix not in ("weight", "bias"):
            raise KeyError(
                f"tensor {key!r} has no llama.cpp counterpart in a {arch!r} GGUF file; ftune exports the "
                "decoder weights of llama, mistral, qwen2, qwen3 and gemma3 models only."
            )
        kind = name.rpartition(".")[2]
        if arch == "llama" and kind in ("attn_q", "attn_k"):
            value = to_meta_qk(value, num_heads if kind == "attn_q" else num_kv_heads)
        if arch == "gemma3" and key.endswith("norm.weight"):
            value = value.float() + 1.0  # llama.cpp's RMSNorm multiplies by the stored weight
        out[f"{name}.{suffix}"] = value
    return out


def tensor_type(name: str, shape: tuple[int, ...], ftype: FileType, *, tied: bool) -> GGMLType:
    """The GGML type llama.cpp gives tensor `name` (GGUF name, torch shape) in a `ftype` file.

    Args:
        name: GGUF tensor name.
        shape: torch shape ([rows, cols] for a matrix).
        ftype: the file type.
        tied: the model has no output.weight (token_embd serves as the output projection).
    """
    if len(shape) < 2 or name.endswith("_norm.weight") or name == "rope_freqs.weight":
        return GGMLType.F32
    is_output = name == "output.weight" or (tied and name == "token_embd.weight")
    qtype = ftype.output if is_output and ftype.output is not None else ftype.matrix
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if shape[-1] % block:  # rows must be whole blocks; llama.cpp's converter falls back to F16
        logger.warning(
            "%s: rows of %d values are not whole %s blocks of %d; storing it as F16",
            name, shape[-1], qtype.name, block,
        )  # fmt: skip
        return GGMLType.F16
    return qtype


def encode(array: np.ndarray, qtype: GGMLType) -> np.ndarray:
    """`array` (float32, torch shape) as the bytes (or values) GGUFWriter stores for `qtype`."""
    if qtype == GGMLType.F32:
        return np.ascontiguousarray(array, dtype=np.float32)
    if qtype == GGMLType.F16:
        return np.ascontiguousarray(array.astype(np.float16))
    return gguf.quants.quantize(np.ascontiguousarray(array, dtype=np.float32), qtype)


def to_numpy(value: torch.Tensor) -> np.ndarray:
    """A float32 numpy copy of a tensor of any float dtype (bf16 included)."""
    return value.detach().to(torch.float32).cpu().contiguous().numpy()
