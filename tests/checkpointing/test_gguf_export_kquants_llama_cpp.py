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
from kquant_case import LLAMA_FTYPES, SIZES, k_folder, llama_quantize, put_probe
from test_gguf_export import tiny_folder

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


# The families whose tensors meet llama-quantize's other rules: Phi-3's fused attn_qkv (attn_v's
# rules), and 8 experts (Mixtral's shape: Q8_0 attn_k/attn_v, Q5_K attn_output in q4_k_*) in both
# MoE layouts; Gemma 2's post-norms. Rows of 256 everywhere (whole K-quant blocks).
_FAMILY_SIZES = {
    "phi3": {},
    "qwen3_moe": dict(moe_intermediate_size=256, head_dim=64),
    "mixtral": {},
    "gemma2": dict(head_dim=64, query_pre_attn_scalar=64),
}


@pytest.fixture(scope="module")
def family_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    out = {}
    for family, extra in _FAMILY_SIZES.items():
        root = tmp_path_factory.mktemp(family)
        sizes = {**SIZES, "intermediate_size": 512, **extra}
        folder = tiny_folder(root / "model", family, **sizes)
        out[family] = folder, export_gguf(folder, root / "f32.gguf", file_type="f32").path
    return out


@pytest.mark.parametrize("name", sorted(LLAMA_FTYPES))
@pytest.mark.parametrize("family", sorted(_FAMILY_SIZES))
def test_other_families_are_byte_equal_to_llama_quantize(
    family: str, name: str, family_models: dict, tmp_path: Path
) -> None:
    folder, f32 = family_models[family]
    theirs = {t.name: t for t in gguf.GGUFReader(llama_quantize(f32, tmp_path / "theirs.gguf", name)).tensors}
    ours = gguf.GGUFReader(export_gguf(folder, tmp_path / "ours.gguf", file_type=name).path).tensors
    assert sorted(t.name for t in ours) == sorted(theirs)
    for t in ours:
        assert t.tensor_type == theirs[t.name].tensor_type, t.name
        assert np.array_equal(np.asarray(t.data), np.asarray(theirs[t.name].data)), (
            f"{name}: {t.name} differs"
        )
