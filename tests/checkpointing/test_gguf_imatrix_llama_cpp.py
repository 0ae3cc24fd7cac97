"""Quantization with an importance matrix against llama.cpp's quantizer (marker `llama_cpp`).

For each file type llama-quantize makes, ftune's export with `imatrix=` and llama.cpp's
`llama_model_quantize` of ftune's F32 export given the same importance weights (what llama-quantize
--imatrix passes it: the file's sums over counts) hold the same tensors in the same types with the same
bytes: the weighted encoders (Q4_K, Q5_K, Q6_K, Q5_0, Q5_1, Q4_0, Q4_1) and the rule that moves a q4_0
file's first ffn_down to Q4_1. The test model's rows of 256 and 320 meet both the K-quants and their
32-block fallbacks; its blk.1.attn_q.weight starts with the probe rows (zeros, constants, ties...).
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from kquant_case import LLAMA_FTYPES, k_folder, llama_quantize, put_probe

from ftune.checkpointing.gguf.export import export_gguf
from ftune.checkpointing.gguf.imatrix import ImportanceMatrix, read_imatrix, write_imatrix

llama_cpp = pytest.importorskip("llama_cpp", reason="pip install llama-cpp-python==0.3.36 (builds llama.cpp)")
pytestmark = [pytest.mark.llama_cpp, pytest.mark.usefixtures("one_thread")]


def seeded_imatrix(f32: Path) -> ImportanceMatrix:
    """Skewed seeded sums (a few columns dominate, as real activations do) for every block matrix."""
    rng = np.random.default_rng(7)
    out = ImportanceMatrix(datasets=["seeded"], chunk_count=3, chunk_size=512)
    for t in gguf.GGUFReader(f32).tensors:
        if t.name.startswith("blk.") and len(t.shape) == 2 and t.shape[1] > 1:
            cols = int(t.shape[0])  # GGUF shapes are (cols, rows)
            out.sums[t.name] = (rng.gamma(0.3, 50.0, (1, cols)) * 1536).astype(np.float32)
            out.counts[t.name] = np.array([1536.0], dtype=np.float32)
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("imatrix")
    folder = k_folder(root / "model")
    f32 = export_gguf(folder, root / "f32.gguf", file_type="f32").path
    imatrix = write_imatrix(root / "imatrix.gguf", seeded_imatrix(f32))
    probed = root / "probed.gguf"  # the probe rows, for the encoder-only check below
    probed.write_bytes(f32.read_bytes())
    put_probe(probed)
    return folder, f32, imatrix


@pytest.mark.parametrize("name", sorted(LLAMA_FTYPES))
def test_export_with_imatrix_is_byte_equal_to_llama_quantize(
    name: str, model: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    folder, f32, path = model
    imatrix = read_imatrix(path)
    weights = {key: imatrix.weights(key) for key in imatrix.sums}
    theirs = {
        t.name: t for t in gguf.GGUFReader(llama_quantize(f32, tmp_path / "t.gguf", name, weights)).tensors
    }
    plain = {t.name: t for t in gguf.GGUFReader(llama_quantize(f32, tmp_path / "p.gguf", name)).tensors}
    ours = gguf.GGUFReader(export_gguf(folder, tmp_path / "o.gguf", file_type=name, imatrix=path).path)
    changed = 0
    for t in ours.tensors:
        assert t.tensor_type == theirs[t.name].tensor_type, t.name
        assert np.array_equal(np.asarray(t.data), np.asarray(theirs[t.name].data)), (
            f"{name}: {t.name} differs"
        )
        changed += not np.array_equal(np.asarray(t.data), np.asarray(plain[t.name].data))
    assert changed >= 40  # the importance matrix changed the quantized matrices (56 a file)
    assert ours.get_field("quantize.imatrix.chunks_count").contents() == 3


def test_probe_rows_with_imatrix_are_byte_equal(model: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The probe rows through each weighted encoder, against llama.cpp's."""
    from ftune.checkpointing.gguf.imatrix_quants import quantize_weighted

    _, _, path = model
    probed = model[1].parent / "probed.gguf"
    source = next(t for t in gguf.GGUFReader(probed).tensors if t.name == "blk.1.attn_q.weight")
    importance = read_imatrix(path).weights("blk.1.attn_q.weight")
    for name, qtype in (("q4_k_s", "Q4_K"), ("q5_k_s", "Q5_K"), ("q6_k", "Q6_K"), ("q4_0", "Q4_0")):
        out = llama_quantize(probed, tmp_path / f"{name}.gguf", name, {"blk.1.attn_q.weight": importance})
        tensor = next(t for t in gguf.GGUFReader(out).tensors if t.name == "blk.1.attn_q.weight")
        assert tensor.tensor_type.name == qtype
        ours = quantize_weighted(np.array(source.data), gguf.GGMLQuantizationType[qtype], importance)
        np.testing.assert_array_equal(ours, np.asarray(tensor.data), err_msg=qtype)
