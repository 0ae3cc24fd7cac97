"""Importance matrices (ftune.checkpointing.gguf.imatrix, imatrix_collect, imatrix_quants): llama.cpp's
bytes, its file format, and the statistic itself.

The goldens (goldens/kquants_imatrix.npz, made by goldens/make_imatrix_goldens.py with ggml's own
`ggml_quantize_chunk`) hold the probe rows, a seeded importance and llama.cpp's bytes of the rows in
every type that uses one: ftune's weighted encoders must give the same bytes.
test_gguf_imatrix_llama_cpp.py compares whole exported files where llama.cpp is installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import transformers
from kquant_case import SIZES, k_folder, probe_rows
from test_gguf_export import tiny_folder

from ftune.checkpointing.gguf.export import export_gguf
from ftune.checkpointing.gguf.export_types import FILE_TYPES, tensor_type
from ftune.checkpointing.gguf.imatrix import ImportanceMatrix, read_imatrix, write_imatrix
from ftune.checkpointing.gguf.imatrix_collect import collect_imatrix
from ftune.checkpointing.gguf.imatrix_quants import WEIGHTED, quantize_weighted

pytestmark = pytest.mark.usefixtures("one_thread")
Q = gguf.GGMLQuantizationType
GOLDENS = Path(__file__).parent / "goldens" / "kquants_imatrix.npz"


@pytest.mark.parametrize("qtype", WEIGHTED, ids=lambda q: q.name)
def test_weighted_encoder_gives_llama_cpp_bytes_on_the_probe_rows(qtype: Q) -> None:
    goldens = np.load(GOLDENS)
    np.testing.assert_array_equal(goldens["probe"], probe_rows())
    ours = quantize_weighted(goldens["probe"], qtype, goldens["importance"])
    theirs = goldens[qtype.name]
    differing = [i for i in range(len(ours)) if not np.array_equal(ours[i], theirs[i])]
    assert not differing, f"{qtype.name}: probe rows {differing} differ from llama.cpp's bytes"


def test_importance_moves_the_error_to_unimportant_columns() -> None:
    """The weighted fit trades error on light columns for less on heavy ones (what the matrix is for)."""
    rng = np.random.default_rng(0)
    values = rng.standard_normal((64, 512)).astype(np.float32)
    importance = np.where(np.arange(512) % 8 == 0, 100.0, 0.01).astype(np.float32)  # every 8th column heavy
    heavy = np.arange(512) % 8 == 0
    for qtype in (Q.Q4_K, Q.Q5_0):
        plain = (
            gguf.quants.dequantize(gguf.quants.quantize(values, qtype), qtype) if qtype == Q.Q5_0 else None
        )
        if plain is None:
            from ftune.checkpointing.gguf.kquants import quantize_k

            plain = gguf.quants.dequantize(quantize_k(values, qtype), qtype)
        weighted = gguf.quants.dequantize(quantize_weighted(values, qtype, importance), qtype)
        err_plain = float(np.mean((plain - values)[:, heavy] ** 2))
        err_weighted = float(np.mean((weighted - values)[:, heavy] ** 2))
        assert err_weighted < 0.7 * err_plain, (qtype.name, err_weighted, err_plain)


def test_file_round_trip_and_weights(tmp_path: Path) -> None:
    im = ImportanceMatrix(datasets=["calib.txt"], chunk_count=4, chunk_size=128)
    im.sums["blk.0.attn_q.weight"] = np.array([[2.0, 4.0, 6.0]], dtype=np.float32)
    im.counts["blk.0.attn_q.weight"] = np.array([2.0], dtype=np.float32)
    im.sums["blk.0.ffn_down_exps.weight"] = np.array([[1.0, 3.0], [5.0, 7.0]], dtype=np.float32)
    im.counts["blk.0.ffn_down_exps.weight"] = np.array([1.0, 0.0], dtype=np.float32)  # expert 1 never routed
    back = read_imatrix(write_imatrix(tmp_path / "m.gguf", im))
    assert (back.datasets, back.chunk_count, back.chunk_size) == (["calib.txt"], 4, 128)
    np.testing.assert_array_equal(back.weights("blk.0.attn_q.weight"), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(back.weights("blk.0.ffn_down_exps.weight"), [[1.0, 3.0], [1.0, 1.0]])
    assert back.weights("output.weight") is None
    reader = gguf.GGUFReader(tmp_path / "m.gguf")  # llama-imatrix's layout: general.type, (experts, cols)
    assert reader.get_field("general.type").contents() == "imatrix"
    assert reader.get_field("general.architecture") is None
    shapes = {t.name: tuple(int(d) for d in t.shape) for t in reader.tensors}
    assert shapes["blk.0.attn_q.weight.in_sum2"] == (3, 1) and shapes["blk.0.attn_q.weight.counts"] == (1, 1)


def test_read_refuses_other_files(tmp_path: Path) -> None:
    (tmp_path / "old.dat").write_bytes(b"\x01\x00\x00\x00rest")
    with pytest.raises(ValueError, match="llama-imatrix --in-file old.dat -o old.gguf"):
        read_imatrix(tmp_path / "old.dat")
    writer = gguf.GGUFWriter(tmp_path / "model.gguf", "llama")
    writer.add_type("model")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    with pytest.raises(ValueError, match="not an importance matrix .general.type is 'model'"):
        read_imatrix(tmp_path / "model.gguf")
    with pytest.raises(FileNotFoundError, match="ftune export imatrix"):
        read_imatrix(tmp_path / "missing.gguf")


def test_collect_equals_the_statistic_through_transformers(tmp_path: Path) -> None:
    """in_sum2 and counts of every block matrix equal a direct computation with hooks on transformers'
    model: the sum over tokens of each input column's square."""
    folder = tiny_folder(tmp_path / "m", "smollm2", hidden_size=64, intermediate_size=96, num_hidden_layers=2)
    text = tmp_path / "calib.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 40)
    ours = collect_imatrix(folder, text, chunk_size=32, max_chunks=3)
    from ftune.tokenizers import HFTokenizer

    ids = HFTokenizer(folder).encode(text.read_text(), add_bos=False, add_eos=False)[: 3 * 32]
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    sums: dict[str, torch.Tensor] = {}
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and ".layers." in name:
            layer = int(name.split(".layers.")[1].split(".")[0])
            gguf_name = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
                         "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}[name.rsplit(".", 1)[1]]  # fmt: skip
            key = f"blk.{layer}.{gguf_name}.weight"

            def hook(_m, inputs, key=key):
                x = inputs[0].reshape(-1, inputs[0].shape[-1]).double()
                sums[key] = sums.get(key, 0) + (x * x).sum(0)

            hooks.append(module.register_forward_pre_hook(hook))
    with torch.no_grad():
        for k in range(3):
            model(torch.tensor([ids[k * 32 : (k + 1) * 32]]))
    assert sorted(ours.sums) == sorted(sums) and len(sums) == 14
    for key, want in sums.items():
        np.testing.assert_allclose(ours.sums[key][0], want.numpy(), rtol=1e-4, atol=1e-6, err_msg=key)
        assert ours.counts[key].tolist() == [96.0]
    assert (ours.chunk_count, ours.chunk_size, ours.datasets) == (3, 32, ["calib.txt"])
    with pytest.raises(ValueError, match="fewer than one chunk of 4096"):
        collect_imatrix(folder, text, chunk_size=4096)


def test_collect_reads_chat_records_through_the_template(tmp_path: Path) -> None:
    """A .jsonl file's records are rendered through the chat template: the same matrix as that text."""
    folder = tiny_folder(tmp_path / "m", "smollm2", hidden_size=64, intermediate_size=96, num_hidden_layers=1)
    records = [{"messages": [{"role": "user", "content": f"Rewrite {i} please."},
                             {"role": "assistant", "content": f"{i}/{i}"}]} for i in range(60)]  # fmt: skip
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    from ftune.data import Message
    from ftune.tokenizers import HFTokenizer

    tok = HFTokenizer(folder)
    rendered = "".join(tok.render([Message(**m) for m in r["messages"]]) for r in records)
    assert "<|im_start|>assistant" in rendered
    (tmp_path / "train.txt").write_text(rendered)
    a = collect_imatrix(folder, tmp_path / "train.jsonl", chunk_size=64, max_chunks=2)
    b = collect_imatrix(folder, tmp_path / "train.txt", chunk_size=64, max_chunks=2)
    for key in b.sums:
        np.testing.assert_array_equal(a.sums[key], b.sums[key])
    (tmp_path / "bad.jsonl").write_text('{"text": "no messages"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: a .jsonl calibration file holds chat records"):
        collect_imatrix(folder, tmp_path / "bad.jsonl", chunk_size=64)


def test_q4_0_first_ffn_down_takes_q4_1_with_an_imatrix() -> None:
    q4_0 = FILE_TYPES["q4_0"]
    args = dict(tied=True, num_layers=16)
    assert tensor_type("blk.1.ffn_down.weight", (64, 256), q4_0, imatrix=True, **args) == Q.Q4_1
    assert tensor_type("blk.2.ffn_down.weight", (64, 256), q4_0, imatrix=True, **args) == Q.Q4_0
    assert tensor_type("blk.1.ffn_down.weight", (64, 256), q4_0, **args) == Q.Q4_0


def test_export_refuses_a_useless_or_foreign_imatrix(tmp_path: Path) -> None:
    folder = k_folder(tmp_path / "model")
    im = ImportanceMatrix(chunk_count=1, chunk_size=8)
    im.sums["blk.0.attn_q.weight"] = np.ones((1, 100), dtype=np.float32)  # the model's rows are 256
    im.counts["blk.0.attn_q.weight"] = np.ones(1, dtype=np.float32)
    path = write_imatrix(tmp_path / "im.gguf", im)
    with pytest.raises(ValueError, match="--type f16, which an importance matrix does not change"):
        export_gguf(folder, tmp_path / "a.gguf", file_type="f16", imatrix=path)
    with pytest.raises(ValueError, match=r"entry blk.0.attn_q.weight has 100 values .* needs \(256,\)"):
        export_gguf(folder, tmp_path / "b.gguf", file_type="q4_k_m", imatrix=path)


def test_cli_export_imatrix_then_gguf(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`ftune export imatrix` writes the file `ftune export gguf --imatrix` reads; bad arguments are refused
    before the model loads."""
    from ftune.cli.export import main

    folder = tiny_folder(
        tmp_path / "model", "smollm2", **{**SIZES, "num_hidden_layers": 1, "intermediate_size": 256}
    )
    text = tmp_path / "calib.txt"
    text.write_text("Rewrite the date 2036-10-28 in the format MM/DD/YYYY. 10/28/2036\n" * 30)
    assert main(["imatrix", str(folder), str(tmp_path / "m.dat"), "--text", str(text)]) != 0
    assert "does not end in .gguf" in capsys.readouterr().err
    assert main(["imatrix", str(folder), str(tmp_path / "m.gguf"), "--text", str(tmp_path / "no.txt")]) != 0
    assert "--text" in capsys.readouterr().err
    out = tmp_path / "m.gguf"
    assert main(["imatrix", str(folder), str(out), "--text", str(text), "--chunk-size", "64"]) == 0
    assert f"--imatrix {out}" in capsys.readouterr().out
    assert len(read_imatrix(out).sums) == 7
    assert (
        main(["gguf", str(folder), str(tmp_path / "q.gguf"), "--type", "q4_k_m", "--imatrix", str(out)]) == 0
    )
    reader = gguf.GGUFReader(tmp_path / "q.gguf")
    assert reader.get_field("quantize.imatrix.entries_count").contents() == 7
