"""GGUF import (ftune.checkpointing.gguf.reader).

Synthetic: tiny llama GGUF files written here with gguf's own writer, so every number is known
(dequantisers against the block layouts, the q/k permutation, metadata -> config.json, errors).
The real SmolLM2-135M-Instruct file is checked in tests/checkpointing/test_gguf_smollm2.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tiny_gguf import TEMPLATE, TOKENS, _llama_cpp_order, write_tiny_gguf
from tiny_gguf import _tiny_hf_model as _tiny_hf_model
from tokenizers import Tokenizer

from ftune.checkpointing.gguf.reader import convert_gguf, dequantize, hf_key
from ftune.models._meta_keys import from_meta_qk, to_meta_qk  # llama.cpp keeps Meta's q/k row order

Q = gguf.GGMLQuantizationType


# ---------------------------------------------------------------------------------------------
# Dequantisers: hand-built blocks against the layouts of ggml-common.h / ggml-quants.c
# ---------------------------------------------------------------------------------------------


def _f16(x: float) -> bytes:
    return np.float16(x).tobytes()


def _rows(*blocks: bytes) -> np.ndarray:
    return np.frombuffer(b"".join(blocks), dtype=np.uint8).reshape(1, -1)


def test_q8_0_block_is_scale_times_int8() -> None:
    qs = np.arange(-16, 16, dtype=np.int8)
    block = _f16(0.5) + qs.tobytes()  # 2-byte fp16 scale, then 32 int8
    out = dequantize(_rows(block, _f16(-2.0) + qs[::-1].tobytes()), Q.Q8_0)
    assert out.dtype == torch.float32 and out.shape == (1, 64)
    expected = np.concatenate([qs * 0.5, qs[::-1] * -2.0]).astype(np.float32)
    torch.testing.assert_close(out[0], torch.from_numpy(expected), rtol=0, atol=0)


def test_q4_0_and_q4_1_nibble_order() -> None:
    # Byte i holds value i in its low nibble and value i + 16 in its high nibble.
    low, high = np.arange(16), np.arange(15, -1, -1)
    packed = (low | (high << 4)).astype(np.uint8).tobytes()
    nibbles = np.concatenate([low, high]).astype(np.float32)
    q4_0 = dequantize(_rows(_f16(0.25) + packed), Q.Q4_0)[0]
    torch.testing.assert_close(q4_0, torch.from_numpy((nibbles - 8) * 0.25), rtol=0, atol=0)
    q4_1 = dequantize(_rows(_f16(0.5) + _f16(-1.0) + packed), Q.Q4_1)[0]
    torch.testing.assert_close(q4_1, torch.from_numpy(nibbles * 0.5 - 1.0), rtol=0, atol=0)


def _q4_k_reference(block: bytes) -> np.ndarray:
    d, dmin = np.frombuffer(block[:4], dtype=np.float16).astype(np.float64)
    sc, qs = block[4:16], block[16:144]

    def scale_min(j: int) -> tuple[int, int]:  # 8 six-bit (scale, min) pairs packed in 12 bytes
        if j < 4:
            return sc[j] & 63, sc[j + 4] & 63
        return (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4), (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)

    out = []
    for chunk in range(4):  # 64 values per 32 bytes: low nibbles first, then high nibbles
        q = qs[32 * chunk : 32 * chunk + 32]
        (s1, m1), (s2, m2) = scale_min(2 * chunk), scale_min(2 * chunk + 1)
        out += [d * s1 * (b & 0xF) - dmin * m1 for b in q] + [d * s2 * (b >> 4) - dmin * m2 for b in q]
    return np.array(out, dtype=np.float32)


def _q6_k_reference(block: bytes) -> np.ndarray:
    ql, qh = block[:128], block[128:192]
    scales = np.frombuffer(block[192:208], dtype=np.int8)
    d = float(np.frombuffer(block[208:210], dtype=np.float16)[0])
    y = np.zeros(256)
    for half in range(2):  # 128 values from 64 low-bit bytes, 32 high-bit bytes, 8 scales
        lo, hi, sc, base = ql[64 * half :], qh[32 * half :], scales[8 * half :], 128 * half
        for i in range(32):
            k = i // 16
            y[base + i] = d * sc[k] * (((lo[i] & 0xF) | ((hi[i] & 3) << 4)) - 32)
            y[base + i + 32] = d * sc[k + 2] * (((lo[i + 32] & 0xF) | (((hi[i] >> 2) & 3) << 4)) - 32)
            y[base + i + 64] = d * sc[k + 4] * (((lo[i] >> 4) | (((hi[i] >> 4) & 3) << 4)) - 32)
            y[base + i + 96] = d * sc[k + 6] * (((lo[i + 32] >> 4) | (((hi[i] >> 6) & 3) << 4)) - 32)
    return y.astype(np.float32)


def test_k_quants_match_the_block_layout() -> None:
    rng = np.random.default_rng(0)
    q4k = _f16(0.01) + _f16(0.02) + rng.integers(0, 256, 140, dtype=np.uint8).tobytes()
    q6k = rng.integers(0, 256, 208, dtype=np.uint8).tobytes() + _f16(0.003)
    for block, qtype, reference in ((q4k, Q.Q4_K, _q4_k_reference), (q6k, Q.Q6_K, _q6_k_reference)):
        out = dequantize(_rows(block), qtype)
        assert out.shape == (1, 256), qtype.name
        torch.testing.assert_close(out[0], torch.from_numpy(reference(block)), rtol=1e-6, atol=1e-6)


def test_float_types_pass_through() -> None:
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(dequantize(x.numpy(), Q.F32), x)
    assert torch.equal(dequantize(x.half().numpy(), Q.F16), x.half().float())
    bf16_bytes = x.bfloat16().view(torch.uint8).numpy()  # the reader gives BF16 as raw bytes
    assert torch.equal(dequantize(bf16_bytes, Q.BF16), x.bfloat16().float())


# ---------------------------------------------------------------------------------------------
# q/k permutation
# ---------------------------------------------------------------------------------------------


def test_permute_interleaves_the_halves_of_each_head() -> None:
    rows = torch.arange(8.0).unsqueeze(1)  # 2 heads of dim 4, rows labelled by their HF index
    assert to_meta_qk(rows, 2).squeeze(1).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    assert from_meta_qk(torch.tensor([[0.0], [2], [1], [3], [4], [6], [5], [7]]), 2).squeeze(
        1
    ).tolist() == list(range(8))


@pytest.mark.parametrize("num_heads, head_dim", [(1, 2), (3, 8), (4, 64)])
def test_unpermute_inverts_permute(num_heads: int, head_dim: int) -> None:
    w = torch.randn(num_heads * head_dim, 5, generator=torch.Generator().manual_seed(num_heads))
    assert torch.equal(to_meta_qk(w, num_heads), w[_llama_cpp_order(num_heads, head_dim)])
    assert torch.equal(from_meta_qk(to_meta_qk(w, num_heads), num_heads), w)
    assert torch.equal(to_meta_qk(from_meta_qk(w, num_heads), num_heads), w)


def test_tensor_names_map_to_hf_keys() -> None:
    assert hf_key("blk.11.attn_q.weight", source="f") == "model.layers.11.self_attn.q_proj.weight"
    assert hf_key("blk.0.ffn_norm.weight", source="f") == "model.layers.0.post_attention_layernorm.weight"
    assert hf_key("output.weight", source="f") == "lm_head.weight"
    with pytest.raises(
        ValueError, match=r"f: tensor 'blk\.0\.ffn_gate_exps\.weight' is not part of a llama model"
    ):
        hf_key("blk.0.ffn_gate_exps.weight", source="f")


# ---------------------------------------------------------------------------------------------
# Tiny synthetic GGUF files
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tied", [False, True])
def test_f32_file_converts_to_the_exact_hf_weights(tmp_path: Path, tied: bool) -> None:
    from transformers import AutoModelForCausalLM

    model = _tiny_hf_model(tied=tied)
    out = convert_gguf(write_tiny_gguf(tmp_path / "tiny.gguf", model=model), tmp_path / "hf")

    sd = load_file(out / "model.safetensors")
    expected = {k: v for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    assert sd.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(sd[key], value), key

    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is tied
    assert config["torch_dtype"] == "float32"
    got = {k: config[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size")}
    assert got == {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": len(TOKENS),
    }
    assert (config["rms_norm_eps"], config["rope_theta"], config["max_position_embeddings"]) == (
        1e-5,
        10_000.0,
        256,
    )
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 2)

    reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
    x = torch.randint(0, len(TOKENS), (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(x).logits, model(x).logits, rtol=1e-5, atol=1e-5)


def test_q8_0_file_matches_transformers_gguf_loading(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = _tiny_hf_model(tied=False)
    path = write_tiny_gguf(tmp_path / "tiny-q8.gguf", model=model, qtype=Q.Q8_0)
    out = convert_gguf(path, tmp_path / "hf")
    sd = load_file(out / "model.safetensors")
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "float32"
    # 8-bit blocks of 32: within half a step (max|w| / 127 / 2) of the original weights.
    q = sd["model.layers.1.self_attn.q_proj.weight"]
    ref = model.state_dict()["model.layers.1.self_attn.q_proj.weight"]
    assert (q - ref).abs().max() <= ref.abs().max() / 127, "q_proj is not the unpermuted original"

    ours = AutoModelForCausalLM.from_pretrained(out).eval()
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype=torch.float32).eval()
    x = torch.randint(0, len(TOKENS), (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(ours(x).logits, theirs(x).logits, rtol=1e-5, atol=1e-5)


def test_f16_file_keeps_float16(tmp_path: Path) -> None:
    out = convert_gguf(write_tiny_gguf(tmp_path / "tiny-f16.gguf", qtype=Q.F16), tmp_path / "hf")
    sd = load_file(out / "model.safetensors")
    assert {v.dtype for v in sd.values()} == {torch.float16}  # norms too, although stored as F32
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "float16"
    out32 = convert_gguf(tmp_path / "tiny-f16.gguf", tmp_path / "hf32", dtype=torch.float32)
    assert load_file(out32 / "model.safetensors")["model.norm.weight"].dtype == torch.float32


def _llama_cpp_rope_freqs(theta: float, head_dim: int, factor: float) -> np.ndarray:
    # What llama.cpp's converter writes as rope_freqs.weight for Llama 3.1/3.2 (1, 4, 8192 constants).
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * np.pi * theta ** (i / head_dim)
        if wavelen < 8192 / 4:
            out.append(1.0)
        elif wavelen > 8192 / 1:
            out.append(factor)
        else:
            smooth = (8192 / wavelen - 1) / (4 - 1)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def test_llama3_rope_scaling_is_rebuilt_from_rope_freqs(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    scaling = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    scaling["original_max_position_embeddings"] = 8192
    model = _tiny_hf_model(tied=True, rope_theta=500_000.0, rope_scaling=dict(scaling))  # it adds keys
    divisors = _llama_cpp_rope_freqs(500_000.0, 16, 32.0)
    assert 1.0 < divisors[4] < 32.0 and divisors[0] == 1.0 and divisors[-1] == 32.0  # all three bands
    path = write_tiny_gguf(
        tmp_path / "l32.gguf", model=model, rope_theta=500_000.0, extra={"rope_freqs.weight": divisors}
    )
    out = convert_gguf(path, tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["rope_scaling"] == scaling and config["rope_theta"] == 500_000.0
    assert "rope_freqs.weight" not in load_file(out / "model.safetensors")

    reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
    x = torch.randint(0, len(TOKENS), (1, 200), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():  # 200 positions: the scaled frequencies matter
        torch.testing.assert_close(reloaded(x).logits, model(x).logits, rtol=1e-5, atol=1e-5)


def test_tiny_tokenizer_and_configs(tmp_path: Path) -> None:
    out = convert_gguf(write_tiny_gguf(tmp_path / "tiny.gguf"), tmp_path / "hf")
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    ids = tok.encode("<|im_start|>the cat 42<|im_end|>").ids
    # " the" -> Ġthe, " cat" -> Ġcat (merges); digits stay single; control tokens whole.
    assert [TOKENS[i] for i in ids] == ["<|im_start|>", "t", "he", "Ġcat", "Ġ", "4", "2", "<|im_end|>"]
    assert tok.decode(ids, skip_special_tokens=False) == "<|im_start|>the cat 42<|im_end|>"
    assert tok.decode(ids) == "the cat 42"
    ids = tok.encode("a<think>b<｜end▁of▁turn｜>").ids  # added tokens match whole, with their own ids
    assert ids == [TOKENS.index("a"), len(TOKENS) - 1, TOKENS.index("b"), len(TOKENS) - 2]
    assert tok.decode(ids) == "a<think>b"  # only control tokens are special
    assert tok.get_vocab_size(with_added_tokens=True) == len(TOKENS)

    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["chat_template"] == TEMPLATE
    assert (config["bos_token"], config["eos_token"], config["pad_token"]) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|im_end|>",
    )
    assert config["add_bos_token"] is False and config["model_max_length"] == 256
    assert json.loads((out / "special_tokens_map.json").read_text())["eos_token"] == "<|im_end|>"
    assert json.loads((out / "generation_config.json").read_text()) == {
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 2,
    }
    assert not list(out.glob(".*tmp*")), "temporary files left behind"


def test_llama3_pre_tokenizer_splits_like_llama3() -> None:
    from ftune.checkpointing.gguf.tokenizer import PRE_TOKENIZERS

    pieces = [p for p, _ in PRE_TOKENIZERS["llama-bpe"]().pre_tokenize_str("Hello1234567 world's!!\n\n  x")]
    assert pieces == ["Hello", "123", "456", "7", "Ġworld", "'s", "!!ĊĊ", "Ġ", "Ġx"]


_SPM_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, hello there! the cat sat on the mat",
    "def f(x):\n    return x * 2",
    "Numbers 12345 and 3.14 are here.",
    "Café naïve résumé",
    "  two  spaces",
]


def test_sentencepiece_vocab_encodes_like_sentencepiece() -> None:
    # A "llama" (sentencepiece BPE) vocabulary, stored the way llama.cpp's converter stores Llama 2's:
    # pieces, scores and types, no merges. The rebuilt tokenizer must cut text as sentencepiece does.
    import io

    import sentencepiece as spm

    from ftune.checkpointing.gguf.tokenizer import build_tokenizer, tokenizer_configs

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_SPM_TEXT * 30),
        model_writer=model,
        model_type="bpe",
        vocab_size=400,
        byte_fallback=True,
        normalization_rule_name="identity",  # Llama 2's settings
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        character_coverage=1.0,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    ids = range(sp.vocab_size())
    meta = {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [sp.id_to_piece(i) for i in ids],
        "tokenizer.ggml.scores": [sp.get_score(i) for i in ids],
        "tokenizer.ggml.token_type": [
            2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1 for i in ids
        ],
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
    }
    tok = build_tokenizer(meta, source="spm.gguf")
    texts = [
        *_SPM_TEXT,
        "the brown cat",
        "Unseen: 日本語 😀 ÿ\ttab\nnewline",
        " leading",
        "quick quickly quicker",
    ]
    for text in texts:
        assert tok.encode(text, add_special_tokens=False).ids == sp.encode(text), text
        assert tok.decode(sp.encode(text)) == sp.decode(sp.encode(text)), text
    # BOS by default (llama.cpp's default for these vocabularies); a space before text that follows a
    # special token, as llama.cpp does.
    assert tok.encode("hello there").ids == [1, *sp.encode("hello there")]
    assert tok.encode("</s>hello", add_special_tokens=False).ids == [2, *sp.encode("hello")]
    config, _ = tokenizer_configs(meta, source="spm.gguf")
    assert config["add_bos_token"] is True and config["unk_token"] == "<unk>"


# ---------------------------------------------------------------------------------------------
# Errors a user can hit
# ---------------------------------------------------------------------------------------------
