"""phi3 and phi4 (Phi3ForCausalLM) against `transformers` on tiny random models: the sliding window, the
KV cache, packed documents, long sequences; the fused qkv_proj / gate_up_proj converter (bit-exact, with
its errors); the checkpointer round trip transformers loads; LongRoPE refused; the tokenizer against
AutoTokenizer on a Llama-style (Metaspace, byte-fallback BPE) tokenizer.json with Phi-3's chat format."""

import json
from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf
from safetensors.torch import load_file

from ftune.checkpointing import HFCheckpointer, load_hf
from ftune.data.messages import Message
from ftune.generation import generate
from ftune.models import CONVERTERS, family_from_hf_config, model_from_hf_config, phi3, phi4
from ftune.modules.masks import document_causal_mask
from ftune.peft import adapter_state_dict, apply_lora, from_peft, to_peft

transformers = pytest.importorskip("transformers")
VOCAB = 128
pytestmark = pytest.mark.usefixtures("one_thread")


def _tokens(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _pair(family: str, path: Path, **overrides) -> tuple[torch.nn.Module, torch.nn.Module]:
    hf = build_tiny_hf(family, **overrides)
    hf.save_pretrained(path)
    return hf, load_hf(path).eval()


@pytest.mark.parametrize("family", ["phi3", "phi4"])
@pytest.mark.parametrize("seq_len", [40, 160])  # 160: also through the CPU block-skipping attention
def test_logits_match_transformers(family: str, seq_len: int, tmp_path: Path) -> None:
    hf, model = _pair(family, tmp_path)
    assert family_from_hf_config(hf.config.to_dict()) == family
    windows = {layer.attn.sliding_window for layer in model.layers}
    assert windows == ({24} if family == "phi3" else {None})
    tokens = _tokens((2, seq_len), seed=1)
    with torch.no_grad():
        diff = (model(tokens) - hf(tokens).logits).abs().max().item()
    assert diff <= 1e-4, diff


def test_phi3_sliding_window_changes_the_logits() -> None:
    # Guards the parity test against passing vacuously: transformers' Phi-3 applies the window.
    tokens = _tokens((1, 48), seed=2)
    with torch.no_grad():
        windowed = build_tiny_hf("phi3")(tokens).logits
        full = build_tiny_hf("phi3", sliding_window=None)(tokens).logits
    assert (windowed - full).abs().max() > 1e-3


@pytest.mark.parametrize("family", ["phi3", "phi4"])
def test_kv_cache_steps_match_transformers(family: str, tmp_path: Path) -> None:
    # Prefill 20 tokens, then decode 28 one at a time (past phi3's window of 24): 48 positions.
    hf, model = _pair(family, tmp_path)
    tokens = _tokens((1, 48), seed=3)
    with torch.no_grad():
        expected = hf(tokens).logits[0]
        model.setup_caches(batch_size=1, max_seq_len=64)
        prefill = model(tokens[:, :20], input_pos=torch.arange(20)[None])[0]
        steps = [model(tokens[:, i : i + 1], input_pos=torch.tensor([[i]]))[0, 0] for i in range(20, 48)]
    diff = (torch.cat([prefill, torch.stack(steps)]) - expected).abs().max().item()
    assert diff <= 1e-4, diff


@pytest.mark.parametrize("family", ["phi3", "phi4"])
def test_greedy_generation_matches_transformers(family: str, tmp_path: Path) -> None:
    hf, model = _pair(family, tmp_path)
    tokens = _tokens((14,), seed=4).tolist()
    with torch.no_grad():
        for _ in range(8):
            tokens.append(int(hf(torch.tensor([tokens])).logits[0, -1].argmax()))
    assert generate(model, tokens[:14], max_new_tokens=8) == tokens[14:]


@pytest.mark.parametrize("family", ["phi3", "phi4"])
@pytest.mark.parametrize("lengths", [(17, 23), (70, 90)])
def test_packed_documents_match_separate_runs(family: str, lengths: tuple[int, int], tmp_path: Path) -> None:
    hf, model = _pair(family, tmp_path)
    docs = [_tokens((1, n), seed=5 + i) for i, n in enumerate(lengths)]
    tokens = torch.cat(docs, dim=1)
    input_pos = torch.cat([torch.arange(n) for n in lengths])[None]
    doc_ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])[None]
    with torch.no_grad():
        got = model(tokens, input_pos=input_pos, mask=document_causal_mask(doc_ids))
        expected = torch.cat([hf(doc).logits for doc in docs], dim=1)
    assert (got - expected).abs().max().item() <= 1e-4


def test_converter_splits_and_fuses_bit_exactly() -> None:
    hf = build_tiny_hf("phi4")  # GQA: 4 query heads, 2 key/value heads of 16
    live = hf.state_dict()
    sd = CONVERTERS["phi4"].hf_to_ftune(live)
    qkv = live["model.layers.1.self_attn.qkv_proj.weight"]
    assert torch.equal(sd["layers.1.attn.q_proj.weight"], qkv[:64])
    assert torch.equal(sd["layers.1.attn.k_proj.weight"], qkv[64:96])
    assert torch.equal(sd["layers.1.attn.v_proj.weight"], qkv[96:])
    gate_up = live["model.layers.0.mlp.gate_up_proj.weight"]
    assert torch.equal(sd["layers.0.mlp.gate_proj.weight"], gate_up[:96])
    assert torch.equal(sd["layers.0.mlp.up_proj.weight"], gate_up[96:])
    back = CONVERTERS["phi4"].ftune_to_hf(sd)
    assert list(back) == list(live)
    for key, value in live.items():
        assert torch.equal(back[key], value) and back[key].dtype == value.dtype, key


def test_converter_errors_name_the_key() -> None:
    live = build_tiny_hf("phi3").state_dict()
    without_o = {k: v for k, v in live.items() if k != "model.layers.0.self_attn.o_proj.weight"}
    with pytest.raises(KeyError, match=r"qkv_proj.weight needs model.layers.0.self_attn.o_proj.weight"):
        CONVERTERS["phi3"].hf_to_ftune(without_o)
    odd = {**live, "model.layers.0.mlp.gate_up_proj.weight": torch.zeros(191, 64)}
    with pytest.raises(ValueError, match=r"gate_up_proj.weight has 191 rows; gate_up_proj stacks two equal"):
        CONVERTERS["phi3"].hf_to_ftune(odd)
    sd = CONVERTERS["phi3"].hf_to_ftune(live)
    sd.pop("layers.1.attn.k_proj.weight")
    with pytest.raises(KeyError, match=r"model.layers.1.self_attn.qkv_proj.weight is fused from .*k_proj"):
        CONVERTERS["phi3"].ftune_to_hf(sd)
    with pytest.raises(KeyError, match="phi3: unknown key 'model.layers.0.self_attn.q_proj.weight'"):
        CONVERTERS["phi3"].hf_to_ftune({"model.layers.0.self_attn.q_proj.weight": torch.zeros(1)})


@pytest.mark.parametrize("family", ["phi3", "phi4"])
def test_checkpointer_round_trip_is_exact_and_loads_in_transformers(family: str, tmp_path: Path) -> None:
    hf = build_tiny_hf(family)
    hf.save_pretrained(tmp_path / "in")
    ckpt = HFCheckpointer(tmp_path / "in", tmp_path / "out")
    loaded = ckpt.load()
    assert loaded.family == family
    out = ckpt.save(1, loaded.model)
    saved, original = load_file(out / "model.safetensors"), load_file(tmp_path / "in" / "model.safetensors")
    assert saved.keys() == original.keys()
    assert all(torch.equal(saved[k], original[k]) for k in original)
    assert json.loads((out / "config.json").read_text()) == json.loads(
        (tmp_path / "in" / "config.json").read_text()
    )
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokens = _tokens((2, 24), seed=7)
    with torch.no_grad():
        assert torch.equal(reloaded(tokens).logits, hf(tokens).logits)


def _adapted(folder: Path, targets: list[str], use_dora: bool = False) -> torch.nn.Module:
    model = load_hf(folder).eval()
    apply_lora(model, targets=targets, rank=4, alpha=8.0, use_dora=use_dora)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name or name.endswith("magnitude"):
                p.add_(0.1 * torch.randn(p.shape, generator=g))  # "trained": B off zero, magnitudes moved
    return model


# q and v only: k_proj's block of the fused qkv_proj stays empty; gate and up both; o and down unfused.
@pytest.mark.parametrize(
    "targets, use_dora",
    [
        (["q_proj", "v_proj", "o_proj"], False),
        (["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "down_proj"], True),
        (["v_proj", "up_proj"], False),
    ],
)
def test_checkpointer_adapters_load_in_peft_and_resume_exactly(
    targets: list[str], use_dora: bool, tmp_path: Path
) -> None:
    peft = pytest.importorskip("peft")
    hf = build_tiny_hf("phi4")  # GQA: q rows 64, k and v rows 32 each
    hf.save_pretrained(tmp_path / "base")
    model = _adapted(tmp_path / "base", targets, use_dora)
    ckpt = HFCheckpointer(tmp_path / "base", tmp_path / "out")
    ckpt.load()
    settings = {"rank": 4, "alpha": 8.0, "dropout": 0.0, "use_dora": use_dora}
    step = ckpt.save(2, model.state_dict(), adapter_config=settings, recipe_state={"step": 2})
    config = json.loads((step / "adapter_config.json").read_text())
    fused = {"qkv_proj": 3 * 4, "gate_up_proj": 2 * 4}  # every part's block, adapted or not
    expected_patterns = {m: r for m, r in fused.items() if any(t in targets for t in _PARTS[m])}
    assert config["rank_pattern"] == expected_patterns
    assert config["alpha_pattern"] == {m: 8.0 * r / 4 for m, r in expected_patterns.items()}

    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base", dtype=torch.float32)
    theirs = peft.PeftModel.from_pretrained(base, step).eval()
    tokens = _tokens((2, 24), seed=8)
    with torch.no_grad():
        ours, reference, plain = model(tokens), theirs(tokens).logits, hf(tokens).logits
    assert (ours - plain).abs().max() > 1e-2 and (ours - reference).abs().max() <= 1e-4

    loaded = HFCheckpointer(tmp_path / "base", tmp_path / "out", resume_from_checkpoint="auto").load()
    want = adapter_state_dict(model)
    assert loaded.adapter.keys() == want.keys()  # no adapter appears on an untargeted part (k_proj)
    assert all(torch.equal(loaded.adapter[k], want[k]) for k in want)


_PARTS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def test_fused_adapter_layout_errors() -> None:
    model = phi3.phi3(vocab_size=VOCAB, num_layers=1, num_heads=4, num_kv_heads=2, embed_dim=32,
                      intermediate_dim=48, max_seq_len=64)  # fmt: skip
    apply_lora(model, targets=["q_proj", "v_proj"], rank=2, alpha=4.0)
    with pytest.raises(KeyError, match=r"needs the rows of layers.0.attn.k_proj.weight.*pass base_shapes"):
        to_peft(adapter_state_dict(model), "phi3")
    shapes = {k: v.shape for k, v in model.state_dict().items() if "lora" not in k}
    peft_sd = to_peft(adapter_state_dict(model), "phi3", shapes)
    assert peft_sd["base_model.model.model.layers.0.self_attn.qkv_proj.lora_A.weight"].shape == (6, 32)
    assert from_peft(peft_sd, "phi3", shapes).keys() == adapter_state_dict(model).keys()
    dora = phi3.phi3(vocab_size=VOCAB, num_layers=1, num_heads=4, num_kv_heads=2, embed_dim=32,
                     intermediate_dim=48, max_seq_len=64)  # fmt: skip
    apply_lora(dora, targets=["q_proj"], rank=2, alpha=4.0, use_dora=True)
    with pytest.raises(ValueError, match="DoRA on part of the fused model.layers.0.self_attn.qkv_proj"):
        to_peft(adapter_state_dict(dora), "phi3", shapes)


def test_longrope_configs_are_refused() -> None:
    config = build_tiny_hf("phi3").config.to_dict()
    config["rope_parameters"] = {
        "rope_type": "longrope",
        "rope_theta": 10_000.0,
        "short_factor": [1.0] * 8,
        "long_factor": [2.0] * 8,
        "original_max_position_embeddings": 64,
    }
    with pytest.raises(ValueError, match=r"rope_type='longrope' \(the 128k releases.*use a 4k release"):
        model_from_hf_config(config, device="meta")


def test_published_builders() -> None:
    # torchtune 0.6.1's phi3_mini (Phi-3-mini-4k) and phi4_14b numbers; the 4k releases' window of 2047.
    with torch.device("meta"):
        mini, medium, p4 = phi3.phi3_3_8b(), phi3.phi3_14b(), phi4.phi4_14b()
    assert [len(m.layers) for m in (mini, medium, p4)] == [32, 40, 40]
    assert [m.layers[0].attn.num_kv_heads for m in (mini, medium, p4)] == [32, 10, 10]
    assert [m.layers[0].attn.sliding_window for m in (mini, medium, p4)] == [2047, 2047, None]
    assert [m.max_seq_len for m in (mini, medium, p4)] == [4096, 4096, 16_384]
    assert p4.layers[0].attn.rope.base == 250_000.0 and p4.tok_embeddings.weight.shape[0] == 100_352


# Phi-3's chat format: <|user|>/<|assistant|>/<|system|> turns closed by <|end|>, EOS after the last.
PHI3_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)
SPECIALS = ["<unk>", "<s>", "</s>", "<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>", "<|system|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world, the user asks a question and the assistant answers it.",
    "What is the capital of France? Paris is the capital.",
]


def _llama_style_tokenizer(folder: Path) -> Path:
    """A sentencepiece-style tokenizer.json (Metaspace, byte fallback) like Phi-3's, with its specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁")])
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=SPECIALS)
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer.model").write_bytes(b"")  # where torchtune's configs point
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "<|endoftext|>",
        "unk_token": "<unk>",
        "pad_token": "<|endoftext|>",
        "chat_template": PHI3_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_phi3_tokenizer_is_token_exact_with_autotokenizer(tmp_path: Path) -> None:
    folder = _llama_style_tokenizer(tmp_path / "tok")
    tok = phi3.phi3_tokenizer(folder / "tokenizer.model")  # torchtune's path: the folder's tokenizer.json
    reference = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    for text in ["Hello world", "  two  spaces", "ünï©ode ✓ 12345"]:
        assert tok.encode(text, add_eos=False) == reference(text, add_special_tokens=False)["input_ids"]
    conversations = [
        [Message("user", "What is the capital of France?", masked=True), Message("assistant", "Paris.")],
        [
            Message("system", "You are terse.", masked=True),
            Message("user", "Hello world", masked=True),
            Message("assistant", "The fox jumps."),
        ],
    ]
    for conversation in conversations:
        tokens, mask = tok.tokenize_messages(conversation, add_eos=False)
        as_dicts = [{"role": m.role, "content": m.content} for m in conversation]
        expected = reference.apply_chat_template(as_dicts, tokenize=True, return_dict=True)["input_ids"]
        assert tokens == list(expected) and len(mask) == len(tokens)
