"""The K-quant test case: a tiny model with whole 256-value blocks, the probe rows, llama.cpp's quantizer.

Shared by test_gguf_export_kquants*.py and goldens/make_kquant_goldens.py.

The model (smollm2 layout, hidden 256, ffn 320, 8 layers) has rows of 256 (K-quants fit) in every
matrix but ffn_down, whose rows of 320 take llama-quantize's 32-block fallbacks (Q5_0, Q5_1, Q8_0);
8 layers make `use_more_bits` pick layers 0, 3, 6 and 7. The probe rows are the cases a block encoder
gets wrong first: zeros, constant sub-blocks, one sign only, tiny and huge scales, ties, outliers.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import gguf
import numpy as np
from test_gguf_export import tiny_folder

SIZES = dict(
    hidden_size=256, intermediate_size=320, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2
)
PROBE_TENSOR = "blk.1.attn_q.weight"  # the base type of every K file: Q4_K, Q5_K or Q6_K
# llama.cpp's `llama_ftype` of each file type ftune writes by llama-quantize's rules.
LLAMA_FTYPES = {
    name: int(getattr(gguf.LlamaFileType, f"MOSTLY_{name.upper()}"))
    for name in ("q4_0", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k")
}


def k_folder(folder: Path) -> Path:
    return tiny_folder(folder, "smollm2", **SIZES)


def probe_rows() -> np.ndarray:
    """16 seeded rows of 256 float32 values, one super-block each."""
    rng = np.random.default_rng(42)
    rows = (rng.standard_normal((16, 256)) * 0.02).astype(np.float32)
    rows[4] = rng.standard_t(2, 256) * 0.02  # heavy tails
    rows[5, 32:64] = 0  # one zero sub-block
    rows[6] = 0  # a zero block
    rows[7, :32], rows[7, 32:64], rows[7, 64:80] = 0.5, -0.1, 0.25  # constant sub-blocks
    rows[8] = rng.uniform(0.1, 1.0, 256)  # positive only: the minimum is clipped to 0
    rows[9] = rng.uniform(-1.0, -0.1, 256)  # negative only
    rows[10] *= 1e-4  # tiny
    rows[11] *= 2500.0  # huge
    rows[12] *= np.repeat(10.0 ** np.arange(-4, 4), 32)  # each sub-block its own scale
    rows[13] = rng.integers(-16, 17, 256) / 16.0  # values on a grid: rounding ties
    rows[14, 100] = 3.0  # one spike
    rows[15] = (rows[15].view(np.uint32) & 0xFFFF0000).view(np.float32)  # bf16 values, as bf16 weights give
    return rows


def put_probe(path: Path) -> np.ndarray:
    """Overwrite the first 16 rows of PROBE_TENSOR in the F32 file `path` with `probe_rows()`."""
    probe = probe_rows()
    tensor = next(t for t in gguf.GGUFReader(path, "r+").tensors if t.name == PROBE_TENSOR)
    tensor.data[: len(probe)] = probe  # a view of the file's memory map (mode r+)
    return probe


def llama_quantize(
    source: Path, target: Path, name: str, imatrix: dict[str, np.ndarray] | None = None
) -> Path:
    """llama.cpp's `llama_model_quantize` (one thread) of `source` as `name`, with `imatrix` (tensor name
    -> float32 weights, what llama-quantize --imatrix passes: the file's sums over counts) if given."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = LLAMA_FTYPES[name]
    params.nthread = 1
    if imatrix:
        keep = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in imatrix.items()}
        entries = (llama_cpp.llama_model_imatrix_data * (len(keep) + 1))()  # ends with a null name
        for entry, (key, values) in zip(entries, keep.items()):
            entry.name = key.encode()
            entry.data = values.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            entry.size = values.size
        params.imatrix = ctypes.cast(entries, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    rc = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    assert rc == 0, f"llama_model_quantize({source}, {name}) returned {rc}"
    return target
