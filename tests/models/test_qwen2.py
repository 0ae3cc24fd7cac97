"""The qwen2 family against `transformers`' Qwen2ForCausalLM on tiny random models: ftune's qwen2 builder
(not the qwen2_5 one a bare folder loads as) with the KV cache, packed documents and long sequences; the
checkpointer with model_type qwen2; the tokenizer against AutoTokenizer; the published builders' numbers."""

import json
import sys
from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf
from safetensors.torch import load_file

from ftune.checkpointing import HFCheckpointer
from ftune.generation import generate
from ftune.models import CONVERTERS, builder_kwargs, qwen2
from ftune.modules.masks import document_causal_mask

transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tokenizers"))
from tiny_tokenizer_files import chatml_config, train_hf_tokenizer  # noqa: E402

from ftune.data.messages import Message  # noqa: E402

VOCAB = 128
pytestmark = pytest.mark.usefixtures("one_thread")


def _tokens(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _pair(**overrides) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A tiny transformers Qwen2 and ftune's qwen2 builder with its config's sizes and its weights."""
    hf = build_tiny_hf("qwen2", **overrides)
    config = hf.config.to_dict()
    model = qwen2.qwen2(**builder_kwargs(config, "qwen2"))
    sd = CONVERTERS["qwen2"].hf_to_ftune(hf.state_dict(), tie_word_embeddings=config["tie_word_embeddings"])
    model.load_state_dict(sd, strict=True)
    return hf, model.eval()


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("seq_len", [40, 160])  # 160: also through the CPU block-skipping attention
def test_logits_match_transformers(tied: bool, seq_len: int) -> None:
    hf, model = _pair(tie_word_embeddings=tied)
    assert (model.output is None) == tied
    assert model.layers[0].attn.q_proj.bias is not None and model.layers[0].attn.o_proj.bias is None
    tokens = _tokens((2, seq_len), seed=1)
    with torch.no_grad():
        expected = hf(tokens).logits
        got = model(tokens)
    assert got.shape == expected.shape == (2, seq_len, VOCAB)
    assert (got - expected).abs().max().item() <= 1e-4


def test_qkv_biases_are_used() -> None:
    # Guards the parity test against passing vacuously: zeroing the q/k/v biases changes the logits.
    hf, model = _pair()
    tokens = _tokens((1, 40), seed=2)
    with torch.no_grad():
        before = model(tokens)
        for layer in model.layers:
            for proj in (layer.attn.q_proj, layer.attn.k_proj, layer.attn.v_proj):
                proj.bias.zero_()
        assert (model(tokens) - before).abs().max() > 1e-3


def test_kv_cache_steps_match_transformers() -> None:
    # Prefill 20 tokens, then decode 24 one at a time: 44 positions, each equal to transformers' full forward.
    hf, model = _pair()
    tokens = _tokens((1, 44), seed=3)
    with torch.no_grad():
        expected = hf(tokens).logits[0]
        model.setup_caches(batch_size=1, max_seq_len=64)
        prefill = model(tokens[:, :20], input_pos=torch.arange(20)[None])[0]
        steps = [model(tokens[:, i : i + 1], input_pos=torch.tensor([[i]]))[0, 0] for i in range(20, 44)]
    got = torch.cat([prefill, torch.stack(steps)])
    assert (got - expected).abs().max().item() <= 1e-4


def test_greedy_generation_matches_transformers() -> None:
    hf, model = _pair()
    tokens = _tokens((14,), seed=4).tolist()
    with torch.no_grad():
        for _ in range(8):
            tokens.append(int(hf(torch.tensor([tokens])).logits[0, -1].argmax()))
    assert generate(model, tokens[:14], max_new_tokens=8) == tokens[14:]


@pytest.mark.parametrize("lengths", [(17, 23), (70, 90)])  # (70, 90): through the CPU block path
def test_packed_documents_match_separate_runs(lengths: tuple[int, int]) -> None:
    hf, model = _pair()
    docs = [_tokens((1, n), seed=5 + i) for i, n in enumerate(lengths)]
    tokens = torch.cat(docs, dim=1)
    input_pos = torch.cat([torch.arange(n) for n in lengths])[None]
    doc_ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])[None]
    with torch.no_grad():
        got = model(tokens, input_pos=input_pos, mask=document_causal_mask(doc_ids))
        expected = torch.cat([hf(doc).logits for doc in docs], dim=1)
    assert (got - expected).abs().max().item() <= 1e-4


def test_checkpointer_with_model_type_qwen2_round_trips_and_transformers_loads_it(tmp_path: Path) -> None:
    hf = build_tiny_hf("qwen2")
    hf.save_pretrained(tmp_path / "in")
    ckpt = HFCheckpointer(tmp_path / "in", tmp_path / "out", model_type="qwen2")
    loaded = ckpt.load()
    assert loaded.family == "qwen2"
    model = qwen2.qwen2(**builder_kwargs(hf.config.to_dict(), "qwen2"))
    model.load_state_dict(loaded.model, strict=True)
    out = ckpt.save(1, model.state_dict())
    saved, original = load_file(out / "model.safetensors"), load_file(tmp_path / "in" / "model.safetensors")
    assert saved.keys() == original.keys()
    assert all(torch.equal(saved[k], original[k]) for k in original)
    assert json.loads((out / "config.json").read_text())["model_type"] == "qwen2"
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokens = _tokens((2, 24), seed=7)
    with torch.no_grad():
        assert torch.equal(reloaded(tokens).logits, hf(tokens).logits)


CONVERSATIONS = [
    [Message("user", "What is the capital of France?", masked=True), Message("assistant", "Paris.")],
    [
        Message("system", "You are terse.", masked=True),
        Message("user", "Hello world", masked=True),
        Message("assistant", "Hi."),
        Message("user", "The fox?", masked=True),
        Message("assistant", " It jumps over the lazy dog. ✓\n"),
    ],
]


def test_tokenizer_is_token_exact_with_autotokenizer(tmp_path: Path) -> None:
    # Qwen2-Instruct's chat template: ChatML with the default system prompt "You are a helpful assistant."
    folder = train_hf_tokenizer(tmp_path / "tok", chatml_config())
    tok = qwen2.qwen2_tokenizer(folder)
    reference = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    for text in ["Hello world", "ünï©ode ✓ 12345", "a <|im_end|> inside"]:
        assert tok.encode(text, add_eos=False) == reference(text)["input_ids"]
    for conversation in CONVERSATIONS:
        tokens, mask = tok.tokenize_messages(conversation, add_eos=False)
        as_dicts = [{"role": m.role, "content": m.content} for m in conversation]
        expected = reference.apply_chat_template(as_dicts, tokenize=True, return_dict=True)["input_ids"]
        assert tokens == list(expected) and len(mask) == len(tokens)
    assert tok.eos_id == reference.convert_tokens_to_ids("<|im_end|>")
    first = tok.tokenize_messages(CONVERSATIONS[0], add_eos=False)[0]
    assert tok.decode(first, skip_special_tokens=False).startswith(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>"
    )


@pytest.mark.parametrize(
    "builder, tied, layers, vocab",
    [("qwen2_0_5b", True, 24, 151_936), ("qwen2_1_5b", True, 28, 151_936), ("qwen2_7b", False, 28, 152_064)],
)
def test_published_builders_match_torchtunes_qwen2(builder: str, tied: bool, layers: int, vocab: int) -> None:
    # torchtune 0.6.1's qwen2 builders: the instruct releases' sizes, context 32768, rope theta 1e6, eps 1e-6.
    with torch.device("meta"):
        model = getattr(qwen2, builder)()
    assert (model.output is None) == tied and len(model.layers) == layers
    assert model.tok_embeddings.weight.shape[0] == vocab and model.max_seq_len == 32_768
    assert model.layers[0].attn.rope.base == 1_000_000.0 and model.norm.eps == 1e-6
