"""GGUF export: the file types (per-tensor choices, stored bytes, measured logit error), the tokenizer
metadata token for token, and a LoRA/DoRA adapter merged on the way out."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from test_gguf_export import TEXTS, _tokens, tiny_folder
from tokenizers import Tokenizer

from ftune.checkpointing import HFCheckpointer, load_hf
from ftune.checkpointing.gguf.export import export_gguf
from ftune.checkpointing.gguf.export_tensors import gguf_tensors
from ftune.checkpointing.gguf.export_types import FILE_TYPES
from ftune.checkpointing.gguf.reader import convert_gguf, read_metadata
from ftune.checkpointing.gguf.tokenizer import build_tokenizer
from ftune.config.gguf_args import GGUF_TYPES, check_gguf_type
from ftune.models import CONVERTERS
from ftune.peft import adapter_state_dict, apply_lora

pytestmark = pytest.mark.usefixtures("one_thread")
Q = gguf.GGMLQuantizationType

# Max |logit - F32 logit| / max |F32 logit| on `_tokens()`, measured on these seeded models
# (smollm2, llama2, gemma3; 2026-12, this code), each bound about 1.5x the worst measured value:
# f16 0.0008 / 0.0008 / 0.0043, bf16 0.0066 / 0.0067 / 0.068, q8_0 0.023 / 0.021 / 0.13,
# q4_0 0.34 / 0.32 / 1.02 (tiny random models amplify weight noise; gemma3's most).
BOUNDS = {
    "smollm2": {"f16": 0.0015, "bf16": 0.01, "q8_0": 0.035, "q4_0": 0.5},
    "llama2": {"f16": 0.0015, "bf16": 0.01, "q8_0": 0.035, "q4_0": 0.5},
    "gemma3": {"f16": 0.0065, "bf16": 0.1, "q8_0": 0.2, "q4_0": 1.5},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("types")
    return {family: tiny_folder(root / family, family) for family in BOUNDS}


@pytest.mark.parametrize("family", sorted(BOUNDS))
@pytest.mark.parametrize("name", ["f16", "bf16", "q8_0", "q4_0"])
def test_each_tensor_is_the_reference_quantization_and_logits_stay_in_bound(
    family: str, name: str, folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = folders[family]
    exported = export_gguf(folder, tmp_path / "m.gguf", file_type=name)
    ftype = FILE_TYPES[name]
    reader = gguf.GGUFReader(exported.path)
    assert reader.fields["general.file_type"].contents() == ftype.file_type
    tied = "output.weight" not in {t.name for t in reader.tensors}
    hf = CONVERTERS[family].ftune_to_hf(HFCheckpointer(folder).load().model)
    hf.pop("lm_head.weight", None) if tied else None
    arch = exported.architecture
    expected = gguf_tensors(
        hf, arch=arch, num_heads=4, num_kv_heads=2, num_layers=6 if family == "gemma3" else 2
    )
    for t in reader.tensors:
        want = expected[t.name].float().numpy()
        if len(t.shape) == 1 or t.name.endswith("_norm.weight"):  # llama.cpp keeps these in F32
            assert t.tensor_type == Q.F32, t.name
        elif name == "q4_0" and t.name == ("token_embd.weight" if tied else "output.weight"):
            # llama-quantize keeps the output in Q6_K; rows of 64 are not whole 256-blocks: Q8_0
            assert t.tensor_type == Q.Q8_0, t.name
        else:
            assert t.tensor_type == ftype.matrix, t.name
        stored = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        if t.tensor_type == Q.F32:
            reference = want
        elif t.tensor_type == Q.F16:
            reference = want.astype(np.float16).astype(np.float32)
        else:
            reference = gguf.quants.dequantize(gguf.quants.quantize(want, t.tensor_type), t.tensor_type)
        np.testing.assert_array_equal(stored, reference, err_msg=t.name)

    if family == "gemma3" or arch == "llama":  # what ftune's importer reads back
        ours = load_hf(folder).eval()
        back = load_hf(convert_gguf(exported.path, tmp_path / "back", dtype=torch.float32)).eval()
        with torch.no_grad():
            want, got = ours(_tokens()), back(_tokens())
        relative = ((got - want).abs().max() / want.abs().max()).item()
        print(f"\n{family} {name}: max |logit error| / max |logit| = {relative:.4f}")
        assert relative <= BOUNDS[family][name]


def test_q4_0_size_is_about_a_quarter_of_f16(folders: dict[str, Path], tmp_path: Path) -> None:
    sizes = {
        t: export_gguf(folders["llama2"], tmp_path / f"{t}.gguf", file_type=t).path.stat().st_size
        for t in ("f32", "f16", "bf16", "q8_0", "q4_0")  # K-quants: test_gguf_export_kquants.py
    }
    assert sizes["f32"] > sizes["f16"] == sizes["bf16"] > sizes["q8_0"] > sizes["q4_0"]


# ---------------------------------------------------------------------------------------------
# Tokenizer metadata, token for token
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["smollm2", "llama3", "llama2", "gemma3"])
def test_tokenizer_metadata_rebuilds_the_reference_tokenizer(family: str, tmp_path: Path) -> None:
    folder = tiny_folder(tmp_path / "model", family)
    path = export_gguf(folder, tmp_path / "m.gguf", file_type="f32").path
    meta = read_metadata(gguf.GGUFReader(path), path)
    reference = Tokenizer.from_file(str(folder / "tokenizer.json"))
    vocab = reference.get_vocab(with_added_tokens=True)
    tokens = meta["tokenizer.ggml.tokens"]
    assert all(tokens[i] == t for t, i in vocab.items())  # every token at its id
    assert all(t == f"[PAD{i}]" for i, t in enumerate(tokens) if i >= len(vocab))  # embedding padding
    if meta["tokenizer.ggml.model"] == "gpt2":
        assert meta["tokenizer.ggml.pre"] == {"smollm2": "smollm", "llama3": "llama-bpe"}[family]
        assert meta["tokenizer.ggml.merges"] == [" ".join(m) for m in _merges(reference)]
    rebuilt = build_tokenizer(meta, source=path)  # ftune's importer: llama.cpp's rules in `tokenizers`
    for text in [*TEXTS, " ".join(TEXTS), "<|im_start|>user\nhi<|im_end|>", "</s>after a special"]:
        want = reference.encode(text, add_special_tokens=False).ids
        assert rebuilt.encode(text, add_special_tokens=False).ids == want, text


def test_qwen2_tokenizer_matches_transformers_gguf_tokenizer(tmp_path: Path) -> None:
    import transformers

    folder = tiny_folder(tmp_path / "model", "qwen2_5")
    path = export_gguf(folder, tmp_path / "m.gguf", file_type="f32").path
    meta = read_metadata(gguf.GGUFReader(path), path)
    assert meta["tokenizer.ggml.pre"] == "qwen2"
    reference = Tokenizer.from_file(str(folder / "tokenizer.json"))
    loaded = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    for text in [*TEXTS, " ".join(TEXTS)]:
        assert loaded(text, add_special_tokens=False).input_ids == reference.encode(text).ids, text


def test_sentencepiece_scores_follow_merge_order(tmp_path: Path) -> None:
    folder = tiny_folder(tmp_path / "model", "llama2")
    path = export_gguf(folder, tmp_path / "m.gguf", file_type="f32").path
    meta = read_metadata(gguf.GGUFReader(path), path)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    vocab = tok.get_vocab()
    pairs = _merges(tok)  # scores rank pieces as the merges do: first merge, highest score
    made = [vocab["".join(p)] for p in pairs]
    scores = [meta["tokenizer.ggml.scores"][i] for i in dict.fromkeys(made)]
    assert scores == sorted(scores, reverse=True)
    types = meta["tokenizer.ggml.token_type"]
    assert types[vocab["<0x41>"]] == gguf.TokenType.BYTE and types[vocab["<s>"]] == gguf.TokenType.CONTROL
    assert meta["tokenizer.ggml.add_space_prefix"] is True and meta["tokenizer.ggml.add_bos_token"] is True


def test_byte_level_specials_and_user_defined_types(tmp_path: Path) -> None:
    folder = tiny_folder(tmp_path / "model", "smollm2")
    path = export_gguf(folder, tmp_path / "m.gguf", file_type="f32").path
    meta = read_metadata(gguf.GGUFReader(path), path)
    vocab = Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab(with_added_tokens=True)
    types = meta["tokenizer.ggml.token_type"]
    assert types[vocab["<|im_end|>"]] == gguf.TokenType.CONTROL
    assert types[vocab["<think>"]] == gguf.TokenType.USER_DEFINED
    assert types[vocab["Ġ"]] == gguf.TokenType.NORMAL and types[-1] == gguf.TokenType.UNUSED
    assert meta["tokenizer.ggml.eos_token_id"] == vocab["<|im_end|>"]
    assert meta["tokenizer.ggml.bos_token_id"] == vocab["<|im_start|>"]
    assert meta["tokenizer.chat_template"].startswith("{% for m in messages %}<|im_start|>")


# ---------------------------------------------------------------------------------------------
# Base + adapter, merged on the way
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_dora", [False, True])
def test_adapter_is_merged_into_the_exported_weights(use_dora: bool, tmp_path: Path) -> None:
    folder = tiny_folder(tmp_path / "base", "smollm2")
    model = load_hf(folder).eval()
    apply_lora(model, targets=["q_proj", "v_proj", "down_proj"], rank=4, alpha=8.0, use_dora=use_dora)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for value in adapter_state_dict(model).values():  # "trained": off their zero init
            value.add_(0.1 * torch.randn(value.shape, generator=g))
        expected = model(_tokens())
        plain = load_hf(folder).eval()(_tokens())
    ckpt = HFCheckpointer(folder, tmp_path / "run")
    step = ckpt.save(3, model.state_dict(), adapter_config={"rank": 4, "alpha": 8.0, "use_dora": use_dora})
    path = export_gguf(folder, tmp_path / "m.gguf", file_type="f32", adapter_dir=step).path
    back = load_hf(convert_gguf(path, tmp_path / "back")).eval()
    with torch.no_grad():
        got = back(_tokens())
    assert (expected - plain).abs().max() > 0.05  # the adapter matters
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def _merges(tok: Tokenizer) -> list[list[str]]:
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [m if isinstance(m, list) else m.split(" ") for m in merges]


def test_the_types_export_checks_before_torch_are_the_types_it_writes():
    """`ftune export` refuses a --type from ftune.config.gguf_args before torch loads: the same list."""
    assert GGUF_TYPES == tuple(FILE_TYPES)
    assert check_gguf_type("Q8_0") == "q8_0"
    with pytest.raises(
        ValueError,
        match=r"--type 'q3_k_m' is not a GGUF type ftune writes\. Accepted: f32, f16.*q4_k_m, q4_k_s, q4_0 "
        r"\(q4_k_m is the usual 4-bit pick; for other llama\.cpp types.*llama-quantize",
    ):
        check_gguf_type("q3_k_m")
