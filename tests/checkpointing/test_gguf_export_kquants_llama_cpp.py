"""ftune's K-quant files against llama.cpp's quantizer run on the same F32 file (marker `llama_cpp`).

For each file type llama-quantize makes (q4_0, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k), ftune's export
and llama.cpp's `llama_model_quantize` of ftune's F32 export (no importance matrix) hold the same
tensors in the same GGML types with the same bytes. llama.cpp's reference quantizers are
deterministic for every type these files use (Q4_K, Q5_K, Q6_K, Q4_0, Q5_0, Q5_1, Q8_0): without an
importance matrix each block is a pure function of its 32 or 256 float32 values, whatever the thread
count.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from kquant_case import LLAMA_FTYPES, k_folder, llama_quantize, put_probe

from ftune.checkpointing.gguf.export import export_gguf

llama_cpp = pytest.importorskip("llama_cpp", reason="pip install llama-cpp-python==0.3.36 (builds llama.cpp)")
pytestmark = [pytest.mark.llama_cpp, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("kq")
    folder = k_folder(root / "model")
    return folder, export_gguf(folder, root / "f32.gguf", file_type="f32").path


@pytest.mark.parametrize("name", sorted(LLAMA_FTYPES))
def test_every_tensor_is_byte_equal_to_llama_quantize(
    name: str, model: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, f32 = model
    theirs = {t.name: t for t in gguf.GGUFReader(llama_quantize(f32, tmp_path / "theirs.gguf", name)).tensors}
    ours = {
        t.name: t
        for t in gguf.GGUFReader(export_gguf(folder, tmp_path / "ours.gguf", file_type=name).path).tensors
    }
    assert sorted(ours) == sorted(theirs)  # llama-quantize writes them in its own order
    for key, t in ours.items():
        assert t.tensor_type == theirs[key].tensor_type, key
        assert np.array_equal(np.asarray(t.data), np.asarray(theirs[key].data)), f"{name}: {key} differs"


def test_probe_rows_are_byte_equal_to_llama_quantize(model: tuple[Path, Path], tmp_path: Path) -> None:
    """The probe rows (zeros, constants, one sign, tiny/huge scales, ties) in all three K types, live."""
    from ftune.checkpointing.gguf.kquants import quantize_k

    f32 = Path(tmp_path / "probe.gguf")
    f32.write_bytes(model[1].read_bytes())
    probe = put_probe(f32)
    for name, qtype in (("q4_k_s", "Q4_K"), ("q5_k_s", "Q5_K"), ("q6_k", "Q6_K")):
        path = llama_quantize(f32, tmp_path / f"{name}.gguf", name)
        tensor = next(t for t in gguf.GGUFReader(path).tensors if t.name == "blk.1.attn_q.weight")
        assert tensor.tensor_type.name == qtype
        ours = quantize_k(probe, gguf.GGMLQuantizationType[qtype])
        np.testing.assert_array_equal(ours, np.asarray(tensor.data)[: len(probe)], err_msg=qtype)
