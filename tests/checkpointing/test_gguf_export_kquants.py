"""GGUF K-quants (ftune.checkpointing.gguf.kquants, export_types): llama.cpp's bytes, its per-tensor
types, and what the files give back.

The goldens (goldens/kquants.npz, made by goldens/make_kquant_goldens.py with llama.cpp's own
quantizer) hold 16 probe rows and llama.cpp's Q4_K, Q5_K and Q6_K bytes of them: ftune's encoder must
give the same bytes. test_gguf_export_kquants_llama_cpp.py compares whole files against llama.cpp
where it is installed.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from kquant_case import k_folder, probe_rows
from test_gguf_export import _tokens

from ftune.checkpointing import load_hf
from ftune.checkpointing.gguf.export import export_gguf
from ftune.checkpointing.gguf.export_types import FILE_TYPES, tensor_type, use_more_bits, wide_attn_v
from ftune.checkpointing.gguf.kquants import quantize_k
from ftune.checkpointing.gguf.reader import convert_gguf

pytestmark = pytest.mark.usefixtures("one_thread")
Q = gguf.GGMLQuantizationType
GOLDENS = Path(__file__).parent / "goldens" / "kquants.npz"
K_TYPES = [Q.Q4_K, Q.Q5_K, Q.Q6_K]


@pytest.mark.parametrize("qtype", K_TYPES, ids=lambda q: q.name)
def test_encoder_gives_llama_cpp_bytes_on_the_probe_rows(qtype: Q) -> None:
    goldens = np.load(GOLDENS)
    np.testing.assert_array_equal(goldens["probe"], probe_rows())  # the rows llama.cpp quantized
    ours = quantize_k(goldens["probe"], qtype)
    theirs = goldens[qtype.name]
    assert ours.shape == theirs.shape
    differing = [i for i in range(len(ours)) if not np.array_equal(ours[i], theirs[i])]
    assert not differing, f"{qtype.name}: probe rows {differing} differ from llama.cpp's bytes"


# RMS error / RMS value of seeded N(0, 1) rows after a round trip through gguf's (llama.cpp's)
# dequantizer, measured here: Q4_K 0.0720, Q5_K 0.0364, Q6_K 0.0178; bounds about 1.1x.
RMS_BOUND = {Q.Q4_K: 0.08, Q.Q5_K: 0.04, Q.Q6_K: 0.02}


@pytest.mark.parametrize("qtype", K_TYPES, ids=lambda q: q.name)
def test_round_trip_through_the_reference_dequantizer(qtype: Q) -> None:
    values = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32)
    data = quantize_k(values, qtype)
    assert data.shape == gguf.quant_shape_to_byte_shape(values.shape, qtype)
    back = gguf.quants.dequantize(data, qtype)
    rms = float(np.sqrt(np.mean((back - values) ** 2) / np.mean(values**2)))
    print(f"\n{qtype.name}: rms error / rms = {rms:.4f}")
    assert rms <= RMS_BOUND[qtype]


def test_use_more_bits_layers() -> None:
    """llama.cpp's picks: first and last eighth of the layers, and every third layer between."""
    assert [i for i in range(8) if use_more_bits(i, 8)] == [0, 3, 6, 7]
    assert [i for i in range(30) if use_more_bits(i, 30)] == [
        0,
        1,
        2,
        5,
        8,
        11,
        14,
        17,
        20,
        23,
        26,
        27,
        28,
        29,
    ]


MORE = {0, 3, 6, 7}  # use_more_bits of 8 layers


def _expected(name: str, kind: str, layer: int) -> Q:
    """llama-quantize's type for `kind` in layer `layer` of kquant_case's model, written out by hand.
    ffn_down's rows of 320 take the fallbacks (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0)."""
    base = {
        "q4_k_m": Q.Q4_K,
        "q4_k_s": Q.Q4_K,
        "q5_k_m": Q.Q5_K,
        "q5_k_s": Q.Q5_K,
        "q6_k": Q.Q6_K,
        "q4_0": Q.Q4_0,
    }
    fallback = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0, Q.Q4_0: Q.Q4_0}
    if kind == "token_embd":  # tied: the output projection
        return Q.Q6_K
    qtype = base[name]
    if kind == "attn_v":
        if name in ("q4_k_m", "q5_k_m") and layer in MORE:
            return Q.Q6_K
        return Q.Q5_K if name == "q4_k_s" and layer < 4 else qtype
    if kind == "ffn_down":
        if name in ("q4_k_m", "q5_k_m") and layer in MORE:
            qtype = Q.Q6_K
        elif name == "q4_k_s" and layer < 1:
            qtype = Q.Q5_K
        return fallback[qtype]
    return qtype


@pytest.fixture(scope="module")
def k_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return k_folder(tmp_path_factory.mktemp("kquant") / "model")


@pytest.fixture(scope="module")
def f32_tensors(k_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    path = export_gguf(k_model, tmp_path_factory.mktemp("f32") / "m.gguf", file_type="f32").path
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(path).tensors}


# Max |logit - F32 logit| / max |F32 logit| on `_tokens()`, read back by `ftune convert gguf`, measured
# on kquant_case's model (2026-12, this code): q6_k 0.254, q5_k_m 0.315, q5_k_s 0.367, q4_k_m 0.536,
# q4_k_s 0.576, q4_0 0.688; bounds about 1.3x. (Q8_0 gives 0.080 on it: 8 random layers of width 256
# amplify weight noise about 15x; the per-tensor errors below are the finer check.)
LOGIT_BOUND = {"q6_k": 0.33, "q5_k_m": 0.41, "q5_k_s": 0.48, "q4_k_m": 0.7, "q4_k_s": 0.75, "q4_0": 0.9}
# RMS error / RMS of each stored tensor against the F32 weights (N(0, 0.1) here), per GGML type:
# measured at most Q4_K 0.0724, Q5_K 0.0364, Q6_K 0.0179, Q5_0 0.0427, Q5_1 0.0380, Q8_0 0.0054,
# Q4_0 0.0866; bounds about 1.1x.
TENSOR_BOUND = {
    Q.Q4_K: 0.08,
    Q.Q5_K: 0.04,
    Q.Q6_K: 0.02,
    Q.Q5_0: 0.047,
    Q.Q5_1: 0.042,
    Q.Q8_0: 0.006,
    Q.Q4_0: 0.095,
}


@pytest.mark.parametrize("name", list(LOGIT_BOUND))
def test_each_tensor_gets_llama_quantizes_type_and_reads_back(
    name: str, k_model: Path, f32_tensors: dict[str, np.ndarray], tmp_path: Path
) -> None:
    exported = export_gguf(k_model, tmp_path / "m.gguf", file_type=name)
    reader = gguf.GGUFReader(exported.path)
    assert reader.fields["general.file_type"].contents() == FILE_TYPES[name].file_type
    for t in reader.tensors:
        parts = t.name.split(".")
        if len(t.shape) == 1:
            assert t.tensor_type == Q.F32, t.name
            continue
        layer, kind = (int(parts[1]), parts[2]) if parts[0] == "blk" else (-1, parts[0])
        assert t.tensor_type == _expected(name, kind, layer), t.name
        want = f32_tensors[t.name]
        error = gguf.quants.dequantize(np.array(t.data), t.tensor_type) - want
        rms = float(np.sqrt(np.mean(error**2) / np.mean(want**2)))
        assert rms <= TENSOR_BOUND[t.tensor_type], (t.name, t.tensor_type.name, rms)

    ours = load_hf(k_model).eval()
    back = load_hf(convert_gguf(exported.path, tmp_path / "back", dtype=torch.float32)).eval()
    with torch.no_grad():
        want, got = ours(_tokens()), back(_tokens())
    relative = ((got - want).abs().max() / want.abs().max()).item()
    print(f"\n{name}: {exported.path.stat().st_size} bytes, max |logit error| / max |logit| = {relative:.4f}")
    assert relative <= LOGIT_BOUND[name]


def test_k_files_shrink_with_their_bits(k_model: Path, tmp_path: Path) -> None:
    size = {
        name: export_gguf(k_model, tmp_path / f"{name}.gguf", file_type=name).path.stat().st_size
        for name in ("q8_0", "q6_k", "q5_k_m", "q5_k_s", "q4_k_m", "q4_k_s")
    }
    assert size["q8_0"] > size["q6_k"] > size["q5_k_m"] > size["q5_k_s"] > size["q4_k_m"] > size["q4_k_s"]


def test_rules_the_tiny_model_does_not_reach() -> None:
    """An untied output (Q6_K; the embedding keeps the base type) and llama.cpp's 70B rule (attn_v)."""
    k_m = FILE_TYPES["q4_k_m"]
    assert tensor_type("output.weight", (32000, 4096), k_m, tied=False, num_layers=32) == Q.Q6_K
    assert tensor_type("token_embd.weight", (32000, 4096), k_m, tied=False, num_layers=32) == Q.Q4_K
    assert tensor_type("output.weight", (32000, 4096), FILE_TYPES["q8_0"], tied=False) == Q.Q8_0
    v = ("blk.10.attn_v.weight", (1024, 8192))  # layer 10 of 80 is not a use_more_bits layer
    assert tensor_type(*v, k_m, tied=False, num_layers=80) == Q.Q4_K
    assert tensor_type(*v, k_m, tied=False, num_layers=80, wide_attn_v=True) == Q.Q5_K
    assert tensor_type(*v, FILE_TYPES["q5_k_m"], tied=False, num_layers=80, wide_attn_v=True) == Q.Q5_K
    assert wide_attn_v("llama", num_layers=80, num_heads=64, num_kv_heads=8)
    assert not wide_attn_v("llama", num_layers=80, num_heads=64, num_kv_heads=64)  # llama.cpp's 65B
    assert wide_attn_v("qwen2", num_layers=80, num_heads=64, num_kv_heads=8)
    assert not wide_attn_v("qwen3", num_layers=80, num_heads=64, num_kv_heads=8)
    assert not wide_attn_v("llama", num_layers=32, num_heads=32, num_kv_heads=8)


def test_rules_of_fused_attention_and_experts() -> None:
    """Phi-3's attn_qkv takes attn_v's rules; 8 experts give Q8_0 attn_k/attn_v in every file and Q5_K
    attn_output in q4_k_*; the router stays F32 (each checked live against llama-quantize in
    test_gguf_export_kquants_llama_cpp.py)."""
    k_m, k_s = FILE_TYPES["q4_k_m"], FILE_TYPES["q4_k_s"]
    qkv = ("blk.0.attn_qkv.weight", (768, 256))
    assert tensor_type(*qkv, k_m, tied=False, num_layers=8) == Q.Q6_K
    assert tensor_type("blk.1.attn_qkv.weight", (768, 256), k_m, tied=False, num_layers=8) == Q.Q4_K
    assert tensor_type(*qkv, k_s, tied=False, num_layers=8) == Q.Q5_K
    for kind in ("attn_k", "attn_v"):
        for name in ("q4_0", "q4_k_m", "q6_k"):
            got = tensor_type(f"blk.1.{kind}.weight", (128, 256), FILE_TYPES[name], tied=False, num_experts=8)
            assert got == Q.Q8_0, (kind, name)
        assert (
            tensor_type(f"blk.1.{kind}.weight", (128, 256), k_m, tied=False, num_layers=8, num_experts=16)
            == Q.Q4_K
        )
    out = ("blk.1.attn_output.weight", (256, 256))
    assert tensor_type(*out, k_s, tied=False, num_layers=8, num_experts=8) == Q.Q5_K
    assert tensor_type(*out, FILE_TYPES["q5_k_m"], tied=False, num_layers=8, num_experts=8) == Q.Q5_K
    assert tensor_type(*out, FILE_TYPES["q6_k"], tied=False, num_layers=8, num_experts=8) == Q.Q6_K
    assert tensor_type(*out, k_m, tied=False, num_layers=8, num_experts=4) == Q.Q4_K
    for name in ("f16", "q8_0", "q4_k_m"):
        assert tensor_type("blk.0.ffn_gate_inp.weight", (8, 256), FILE_TYPES[name], tied=False) == Q.F32
