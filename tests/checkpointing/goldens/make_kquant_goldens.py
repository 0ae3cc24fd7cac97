"""Write kquants.npz: llama.cpp's own Q4_K, Q5_K and Q6_K bytes of the K-quant probe rows.

    python tests/checkpointing/goldens/make_kquant_goldens.py    # needs llama-cpp-python==0.3.36

The probe rows (tests/checkpointing/kquant_case.py) are written into the first 16 rows of
blk.1.attn_q.weight of the K-quant test model's F32 export; llama.cpp's quantizer
(`llama_model_quantize`, no importance matrix) makes its q4_k_s, q5_k_s and q6_k files, where that
tensor is Q4_K, Q5_K and Q6_K; the probe rows' bytes of each are stored with the rows themselves
(about 30 KB). test_gguf_export_kquants.py encodes the rows with ftune's encoder and wants these bytes.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1] / "models")]
from kquant_case import PROBE_TENSOR, k_folder, llama_quantize, put_probe  # noqa: E402

from ftune.checkpointing.gguf.export import export_gguf  # noqa: E402

FILES = {"Q4_K": "q4_k_s", "Q5_K": "q5_k_s", "Q6_K": "q6_k"}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        f32 = export_gguf(k_folder(root / "model"), root / "f32.gguf", file_type="f32").path
        probe = put_probe(f32)
        out = {"probe": probe}
        for qtype, name in FILES.items():
            path = llama_quantize(f32, root / f"{name}.gguf", name)
            tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == PROBE_TENSOR)
            assert tensor.tensor_type.name == qtype, (name, tensor.tensor_type.name)
            out[qtype] = np.array(tensor.data[: len(probe)])
        np.savez_compressed(HERE / "kquants.npz", **out)
    print(f"wrote {HERE / 'kquants.npz'}: {', '.join(f'{k} {v.shape}' for k, v in out.items())}")


if __name__ == "__main__":
    main()
