"""Write kquants_imatrix.npz: llama.cpp's bytes of the probe rows quantized with an importance matrix.

    PYTHONPATH=<llama-cpp-python 0.3.36 site> python tests/checkpointing/goldens/make_imatrix_goldens.py

The probe rows (tests/checkpointing/kquant_case.py, 16 rows of 256) and a seeded skewed importance
(256 weights, one a column) go through ggml's own `ggml_quantize_chunk` (the function llama-quantize
calls per tensor, from llama-cpp-python's libggml-base) for each type that uses an importance matrix;
the rows, the importance and each type's bytes are stored (about 25 KB).
test_gguf_imatrix.py encodes the rows with ftune's weighted encoders and wants these bytes.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import gguf
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]
from kquant_case import probe_rows  # noqa: E402

TYPES = ["Q4_K", "Q5_K", "Q6_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]


def importance() -> np.ndarray:
    """Seeded weights of 256 columns: a few large, most small (as squared activations are)."""
    return (np.random.default_rng(11).gamma(0.3, 50.0, 256)).astype(np.float32)


def main() -> None:
    import llama_cpp

    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]  # fmt: skip
    rows, weights = probe_rows(), importance()
    out = {"probe": rows, "importance": weights}
    for name in TYPES:
        qtype = gguf.GGMLQuantizationType[name]
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        dst = np.zeros((len(rows), rows.shape[1] // block * size), dtype=np.uint8)
        lib.ggml_quantize_init(int(qtype))
        n = lib.ggml_quantize_chunk(int(qtype), rows.ctypes.data, dst.ctypes.data, 0, len(rows), rows.shape[1],
                                    weights.ctypes.data)  # fmt: skip
        assert n == dst.size, (name, n, dst.size)
        out[name] = dst
    np.savez_compressed(HERE / "kquants_imatrix.npz", **out)
    print(f"wrote {HERE / 'kquants_imatrix.npz'}: {', '.join(f'{k} {v.shape}' for k, v in out.items())}")


if __name__ == "__main__":
    main()
