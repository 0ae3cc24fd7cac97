"""GGUF export, tensor types: the `--type`s of `ftune export gguf` and the GGML type of each tensor.

    ftype = lookup_file_type("q4_k_m")
    qtype = tensor_type("blk.0.attn_v.weight", (64, 576), ftype, tied=True, num_layers=30)
    data = encode(array, qtype)                                  # the bytes GGUFWriter stores

f32, f16, bf16 and q8_0 are what llama.cpp's `convert_hf_to_gguf.py` writes: every matrix in the
type. q4_0 and the K-quant files are what `llama-quantize` makes of an F32/F16 file (with or without
an importance matrix, `imatrix_quants`), tensor by tensor, because its choices are what people compare
against:

- 1-D tensors (norms, biases, `rope_freqs`), every `*_norm.weight` and a mixture of experts' router
  (`ffn_gate_inp`, small, and every token's routing depends on it) stay F32.
- The output projection (token_embd when tied) gets Q6_K in every 4- to 6-bit file: the logits see
  all of its error, and it is one tensor. Where its rows are not whole blocks of the file's main type
  it gets Q8_0 instead.
- `*_k_m` files spend more bits where quantization hurts most: `attn_v` (few heads share it) and
  `ffn_down` (its inputs have the widest range) get Q6_K in the layers `use_more_bits` picks: the
  first and last eighth of the layers and every third layer between. `q4_k_s` gives Q5_K to the first
  4 `attn_v` and the first eighth of `ffn_down`. A 70B-shaped llama/qwen2 (80 layers, grouped-query
  attention) gets Q5_K for the `attn_v` left in Q4_K. `q5_k_s` and `q6_k` are uniform. Phi-3's fused
  `attn_qkv` follows `attn_v`'s rules. A model of exactly 8 experts (Mixtral's shape) gets Q8_0
  `attn_k` and `attn_v` in every file, and Q5_K `attn_output` in `q4_k_*` files.
- A matrix whose rows are not whole 256-value blocks cannot hold a K-quant: it falls back to the
  32-block type of nearly its size (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), and a row that is not
  whole 32-blocks either goes F16. SmolLM2-135M's rows of 576 are such rows: most of its q4_k_m file
  is Q5_0 (so is llama.cpp's).
- With an importance matrix, a q4_0 file's `ffn_down` of the first eighth of the layers is Q4_1.

The block arithmetic is `kquants` for Q4_K/Q5_K/Q6_K (ftune's own encoders) and `gguf.quants`
(llama.cpp's Python port) for Q8_0/Q4_0/Q5_0/Q5_1.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import gguf
import numpy as np

from ftune.checkpointing.gguf.imatrix_quants import WEIGHTED, quantize_weighted
from ftune.checkpointing.gguf.kquants import quantize_k
from ftune.config.gguf_args import check_gguf_type

logger = logging.getLogger(__name__)

GGMLType = gguf.GGMLQuantizationType
LFT = gguf.LlamaFileType


@dataclass(frozen=True)
class FileType:
    """One `--type` of `ftune export gguf`.

    Attributes:
        name: the option's value (lower case, as llama.cpp's tools print it).
        file_type: `general.file_type` (llama.cpp's `llama_ftype`).
        matrix: the GGML type of the 2-D weights that no rule below changes.
        requantized: made as `llama-quantize` makes it (output in Q6_K, the per-tensor rules), not as
            `convert_hf_to_gguf.py` writes it.
    """

    name: str
    file_type: gguf.LlamaFileType
    matrix: GGMLType
    requantized: bool = False


FILE_TYPES: dict[str, FileType] = {
    "f32": FileType("f32", LFT.ALL_F32, GGMLType.F32),
    "f16": FileType("f16", LFT.MOSTLY_F16, GGMLType.F16),
    "bf16": FileType("bf16", LFT.MOSTLY_BF16, GGMLType.BF16),
    "q8_0": FileType("q8_0", LFT.MOSTLY_Q8_0, GGMLType.Q8_0),
    "q6_k": FileType("q6_k", LFT.MOSTLY_Q6_K, GGMLType.Q6_K, True),
    "q5_k_m": FileType("q5_k_m", LFT.MOSTLY_Q5_K_M, GGMLType.Q5_K, True),
    "q5_k_s": FileType("q5_k_s", LFT.MOSTLY_Q5_K_S, GGMLType.Q5_K, True),
    "q4_k_m": FileType("q4_k_m", LFT.MOSTLY_Q4_K_M, GGMLType.Q4_K, True),
    "q4_k_s": FileType("q4_k_s", LFT.MOSTLY_Q4_K_S, GGMLType.Q4_K, True),
    "q4_0": FileType("q4_0", LFT.MOSTLY_Q4_0, GGMLType.Q4_0, True),
}

# llama-quantize's fallback for a K-quant whose rows are not whole 256-value blocks.
_FALLBACK = {GGMLType.Q4_K: GGMLType.Q5_0, GGMLType.Q5_K: GGMLType.Q5_1, GGMLType.Q6_K: GGMLType.Q8_0}
_LAYER = re.compile(r"^blk\.(\d+)\.")


def lookup_file_type(name: str) -> FileType:
    """`FILE_TYPES[name]` (case-insensitive), or a ValueError listing the accepted names (`ftune export`
    checks the name before torch loads: ftune.config.gguf_args)."""
    return FILE_TYPES[check_gguf_type(name)]


def use_more_bits(layer: int, num_layers: int) -> bool:
    """The layers llama.cpp's `*_K_M` mixes give more bits: first and last eighth, every third between."""
    eighth = num_layers // 8
    return layer < eighth or layer >= 7 * num_layers // 8 or (layer - eighth) % 3 == 2


def tensor_type(
    name: str,
    shape: tuple[int, ...],
    ftype: FileType,
    *,
    tied: bool,
    num_layers: int = 0,
    wide_attn_v: bool = False,
    num_experts: int = 0,
    imatrix: bool = False,
) -> GGMLType:
    """The GGML type tensor `name` (GGUF name, torch shape) gets in a `ftype` file.

    Args:
        name: GGUF tensor name.
        shape: torch shape ([rows, cols] for a matrix).
        ftype: the file type.
        tied: the model has no output.weight (token_embd serves as the output projection).
        num_layers: decoder layers (the `*_k_m`/`q4_k_s` rules depend on the layer's position).
        wide_attn_v: llama.cpp's 70B rule applies (80-layer llama with grouped-query attention, or
            80-layer qwen2).
        num_experts: experts of a mixture-of-experts model (0 for a dense one).
        imatrix: the file is quantized with an importance matrix (a q4_0 file's first eighth of
            `ffn_down` then takes Q4_1, as llama-quantize does).
    """
    if (
        len(shape) < 2
        or name.endswith(("_norm.weight", "ffn_gate_inp.weight"))
        or name == "rope_freqs.weight"
    ):
        return GGMLType.F32
    cols = shape[-1]
    qtype = ftype.matrix
    if ftype.requantized:
        qtype = _requantized(
            name,
            cols,
            ftype,
            tied=tied,
            num_layers=num_layers,
            wide_attn_v=wide_attn_v,
            num_experts=num_experts,
            imatrix=imatrix,
        )
    if qtype in _FALLBACK and cols % gguf.GGML_QUANT_SIZES[qtype][0]:
        logger.info("%s: rows of %d are not whole 256-blocks; %s instead of %s", name, cols,
                    _FALLBACK[qtype].name, qtype.name)  # fmt: skip
        qtype = _FALLBACK[qtype]
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    if cols % block:  # both converters store such a matrix as F16
        logger.warning(
            "%s: rows of %d values are not whole %s blocks of %d; storing it as F16",
            name,
            cols,
            qtype.name,
            block,
        )
        return GGMLType.F16
    return qtype


def _requantized(
    name: str,
    cols: int,
    ftype: FileType,
    *,
    tied: bool,
    num_layers: int,
    wide_attn_v: bool,
    num_experts: int,
    imatrix: bool,
) -> GGMLType:
    """llama-quantize's type for a matrix before the block-size fallback (`llama_tensor_get_type`)."""
    qtype = ftype.matrix
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        if cols % gguf.GGML_QUANT_SIZES[qtype][0]:
            return GGMLType.Q8_0
        return GGMLType.Q6_K
    match = _LAYER.match(name)
    if match is None:
        return qtype
    layer, kind = int(match.group(1)), name[match.end() :]
    more = use_more_bits(layer, num_layers)
    if kind.startswith(("attn_v.", "attn_k.")) and num_experts == 8:
        return GGMLType.Q8_0  # Mixtral-shaped: few, small attention matrices beside the experts
    if kind.startswith(("attn_v.", "attn_qkv.")):
        if ftype.name in ("q4_k_m", "q5_k_m") and more:
            qtype = GGMLType.Q6_K
        elif ftype.name == "q4_k_s" and layer < 4:
            qtype = GGMLType.Q5_K
        if wide_attn_v and qtype == GGMLType.Q4_K:
            qtype = GGMLType.Q5_K
    elif kind.startswith("attn_output.") and num_experts == 8 and ftype.name in ("q4_k_m", "q4_k_s"):
        qtype = GGMLType.Q5_K
    elif kind.startswith("ffn_down"):
        if ftype.name in ("q4_k_m", "q5_k_m") and more:
            qtype = GGMLType.Q6_K
        elif ftype.name == "q4_k_s" and layer < num_layers // 8:
            qtype = GGMLType.Q5_K
        elif ftype.name == "q4_0" and imatrix and layer < num_layers // 8:
            qtype = GGMLType.Q4_1  # llama.cpp: guards the first ffn_down layers, only with an imatrix
    return qtype


def wide_attn_v(arch: str, *, num_layers: int, num_heads: int, num_kv_heads: int) -> bool:
    """Whether llama.cpp types the model 70B, which moves its Q4_K `attn_v` to Q5_K."""
    return num_layers == 80 and (arch == "qwen2" or (arch == "llama" and num_heads != num_kv_heads))


def encode(array: np.ndarray, qtype: GGMLType, importance: np.ndarray | None = None) -> np.ndarray:
    """`array` (float32, torch shape) as the bytes (or values) GGUFWriter stores for `qtype`, quantized
    with `importance` (the matrix's importance-matrix weights, `imatrix.ImportanceMatrix.weights`) if given
    and the type uses it (Q8_0 does not, in llama.cpp either)."""
    if importance is not None and qtype in WEIGHTED:
        return quantize_weighted(array, qtype, importance)
    if qtype == GGMLType.F32:
        return np.ascontiguousarray(array, dtype=np.float32)
    if qtype == GGMLType.F16:
        return np.ascontiguousarray(array.astype(np.float16))
    values = np.ascontiguousarray(array, dtype=np.float32)
    if qtype in _FALLBACK:
        return quantize_k(values, qtype)
    return gguf.quants.quantize(values, qtype)
