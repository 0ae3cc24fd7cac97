"""The gemma2 family against `transformers`' Gemma2ForCausalLM (eager attention: the only one that
soft-caps) on tiny random models: long sequences, the KV cache, generation, packed documents, all with
a sliding window shorter than the sequence; gradients; what each Gemma 2 piece changes; both
config.json layouts and the refused options; the checkpointer round trip transformers loads; the
tokenizer; the published builders; the losses' refusal of a soft-capped model."""

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from ftune_tiny_hf import TINY_HF, build_tiny_hf
from safetensors.torch import load_file

from ftune.checkpointing import HFCheckpointer, load_hf
from ftune.checkpointing.hf_config_check import check_against_model
from ftune.data.messages import Message
from ftune.generation import generate
from ftune.models import builder_kwargs, gemma2, model_from_hf_config
from ftune.modules.masks import document_causal_mask
from ftune.modules.softcap import QUERY_BLOCK, softcap, softcapped_attention

transformers = pytest.importorskip("transformers")
VOCAB = 128
WINDOW = TINY_HF["gemma2"][1]["sliding_window"]
pytestmark = pytest.mark.usefixtures("one_thread")


def _tokens(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _pair(path: Path, **overrides) -> tuple[torch.nn.Module, torch.nn.Module]:
    hf = build_tiny_hf("gemma2", **overrides)
    hf.save_pretrained(path)
    return hf, load_hf(path).eval()


def _ftune_of(hf: torch.nn.Module, **changes) -> torch.nn.Module:
    """The ftune model with `hf`'s weights and config, builder arguments changed by `changes`."""
    model = gemma2.gemma2(**{**builder_kwargs(hf.config.to_dict(), "gemma2"), **changes})
    model.load_state_dict(gemma2.hf_to_ftune(hf.state_dict()))
    return model.eval()


def test_long_sequence_matches_transformers(tmp_path: Path) -> None:
    hf, model = _pair(tmp_path)
    tokens = _tokens((2, 2 * QUERY_BLOCK + 30), seed=1)  # three query blocks of the capped attention
    assert tokens.shape[1] > 10 * WINDOW
    with torch.no_grad():
        expected = hf(tokens).logits
        assert (model(tokens) - expected).abs().max().item() <= 1e-4
    assert expected.abs().max() < hf.config.final_logit_softcapping  # capped, and the test's cap bends:
    assert expected.abs().max() > 0.5 * hf.config.final_logit_softcapping  # see the specifics test


def test_kv_cache_steps_match_transformers(tmp_path: Path) -> None:
    hf, model = _pair(tmp_path)
    tokens = _tokens((1, 44), seed=2)
    with torch.no_grad():
        expected = hf(tokens).logits[0]
        model.setup_caches(batch_size=1, max_seq_len=64)
        prefill = model(tokens[:, :20], input_pos=torch.arange(20)[None])[0]
        steps = [model(tokens[:, i : i + 1], input_pos=torch.tensor([[i]]))[0, 0] for i in range(20, 44)]
    assert (torch.cat([prefill, torch.stack(steps)]) - expected).abs().max().item() <= 1e-4


def test_greedy_generation_matches_transformers(tmp_path: Path) -> None:
    # The reference reruns transformers' full forward at each step; generate decodes through the cache
    # and model.project, which applies the final soft cap.
    hf, model = _pair(tmp_path)
    tokens = _tokens((14,), seed=3).tolist()
    with torch.no_grad():
        for _ in range(8):
            tokens.append(int(hf(torch.tensor([tokens])).logits[0, -1].argmax()))
    assert generate(model, tokens[:14], max_new_tokens=8) == tokens[14:]


@pytest.mark.parametrize("lengths", [(17, 23), (70, 90), (30, 150)])  # (30, 150): a block boundary inside
def test_packed_documents_match_separate_runs(lengths: tuple[int, int], tmp_path: Path) -> None:
    hf, model = _pair(tmp_path)
    docs = [_tokens((1, n), seed=4 + i) for i, n in enumerate(lengths)]
    input_pos = torch.cat([torch.arange(n) for n in lengths])[None]
    doc_ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])[None]
    with torch.no_grad():
        got = model(torch.cat(docs, dim=1), input_pos=input_pos, mask=document_causal_mask(doc_ids))
        expected = torch.cat([hf(doc).logits for doc in docs], dim=1)
    assert (got - expected).abs().max().item() <= 1e-4


def test_gradients_match_transformers(tmp_path: Path) -> None:
    # Backward through the blocked, capped attention and both caps: the gradient of a loss on the
    # logits with respect to every weight equals transformers'.
    hf, model = _pair(tmp_path)
    hf.train()
    # Token 0 left out: transformers' embedding has padding_idx = pad_token_id (0), whose row takes no
    # gradient from the lookup; ftune's has no padding row (a pad position is masked out of the loss).
    tokens = _tokens((2, QUERY_BLOCK + 20), seed=8).clamp(min=1)
    targets = _tokens((2 * (QUERY_BLOCK + 20),), seed=9)
    F.cross_entropy(hf(tokens).logits.flatten(0, 1), targets).backward()
    F.cross_entropy(model(tokens).flatten(0, 1), targets).backward()
    theirs = {k: p.grad for k, p in hf.named_parameters()}
    ours = gemma2.ftune_to_hf({k: p.grad for k, p in model.named_parameters()})
    assert ours.keys() == theirs.keys() - {"lm_head.weight"}
    for key, grad in ours.items():
        assert (grad - theirs[key]).abs().max().item() <= 1e-5 * max(1.0, theirs[key].abs().max().item()), key


def test_gemma2_specifics_change_the_logits() -> None:
    # Guards the parity tests against passing vacuously: without either cap, with every layer global,
    # or with head_dim ** -0.5 in place of query_pre_attn_scalar ** -0.5, the logits move.
    hf = build_tiny_hf("gemma2")
    tokens = _tokens((1, 48), seed=6)
    with torch.no_grad():
        expected = hf(tokens).logits
        assert (_ftune_of(hf)(tokens) - expected).abs().max() <= 1e-4
        for changes in (
            dict(attn_logit_softcap=None),
            dict(final_logit_softcap=None),
            dict(layer_types=["full_attention"] * 3),
            dict(query_pre_attn_scalar=16),
        ):
            assert (_ftune_of(hf, **changes)(tokens) - expected).abs().max() > 1e-2, changes


def test_softcapped_attention_without_a_cap_is_sdpa() -> None:
    # A cap far above the scores leaves them as they are: the blocked explicit attention (GQA, a
    # causal or a packed mask) is then SDPA's.
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 300, 8, generator=gen) for h in (4, 2, 2))
    packed = document_causal_mask(torch.cat([torch.zeros(1, 100), torch.ones(1, 200)], dim=1))[:, None]
    for mask in (None, packed):
        got = softcapped_attention(q, k, v, mask, cap=1e9)
        want = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=True
        )
        assert (got - want).abs().max() <= 1e-5
    assert torch.equal(softcap(torch.tensor([0.0, 1e6, -1e6]), 30.0), torch.tensor([0.0, 30.0, -30.0]))


def test_the_head_every_loss_reads_carries_the_cap() -> None:
    # Every loss projects hidden states through model.head (weight and cap): its fp32 logits are the
    # model's own, capped, as forward and project give them.
    model = _ftune_of(build_tiny_hf("gemma2"))
    assert model.head.softcap == 3.0
    hidden = torch.randn(3, 64)
    assert torch.equal(model.project(hidden), softcap(hidden @ model.tok_embeddings.weight.T, 3.0))
    torch.testing.assert_close(model.head.logits(hidden), model.project(hidden).float(), rtol=0, atol=0)


def test_config_layouts_and_defaults() -> None:
    # v5 (layer_types, rope_parameters) and the releases' v4 layout (rope_theta, no layer_types, caps
    # present) read alike; omitted caps take transformers' 50 / 30, explicit nulls turn them off.
    v5 = build_tiny_hf("gemma2").config.to_dict()
    v4 = {k: v for k, v in v5.items() if k not in ("layer_types", "rope_parameters")}
    v4.update(rope_theta=10_000.0, hidden_act="gelu_pytorch_tanh")
    kwargs = builder_kwargs(v5, "gemma2")
    assert {**builder_kwargs(v4, "gemma2"), "layer_types": kwargs["layer_types"]} == kwargs
    omitted = {k: v for k, v in v4.items() if not k.endswith("softcapping")}
    defaults = builder_kwargs(omitted, "gemma2")
    assert (defaults["attn_logit_softcap"], defaults["final_logit_softcap"]) == (50, 30)
    family, model = model_from_hf_config({**v4, "final_logit_softcapping": None}, device="meta")
    assert family == "gemma2" and model.final_logit_softcap is None
    assert [layer.attn.sliding_window for layer in model.layers] == [WINDOW, None, WINDOW]
    # A config.json whose caps differ from the model's (a null cap too) is refused before loading.
    check_against_model(v4, Path("config.json"), gemma2.gemma2(**kwargs))
    for key, cap in (("final_logit_softcapping", None), ("attn_logit_softcapping", 20.0)):
        with pytest.raises(ValueError, match=f"{key} is {cap!r} there"):
            check_against_model({**v4, key: cap}, Path("config.json"), gemma2.gemma2(**kwargs))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(hidden_activation="relu"), "hidden_activation='relu'.*GeGLU uses 'gelu_pytorch_tanh'"),
        (dict(use_bidirectional_attention=True), "use_bidirectional_attention=true"),
        (dict(rope_parameters={"rope_type": "linear", "factor": 2.0}), "RoPE of type 'linear'"),
        (dict(layer_types=["full_attention"]), "layer_types must list 3 entries"),
    ],
)
def test_unsupported_options_are_refused(change: dict, message: str) -> None:
    config = {**build_tiny_hf("gemma2").config.to_dict(), **change}
    with pytest.raises(ValueError, match=message):
        model_from_hf_config(config, device="meta")


def test_checkpointer_round_trip_is_exact_and_loads_in_transformers(tmp_path: Path) -> None:
    hf = build_tiny_hf("gemma2")
    hf.save_pretrained(tmp_path / "in")
    ckpt = HFCheckpointer(tmp_path / "in", tmp_path / "out")
    loaded = ckpt.load()
    assert loaded.family == "gemma2" and "output.weight" not in loaded.model
    out = ckpt.save(1, loaded.model)
    saved, original = load_file(out / "model.safetensors"), load_file(tmp_path / "in" / "model.safetensors")
    assert saved.keys() == original.keys() and all(torch.equal(saved[k], original[k]) for k in original)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(
        out, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    tokens = _tokens((2, 24), seed=7)
    with torch.no_grad():
        assert torch.equal(reloaded(tokens).logits, hf(tokens).logits)


def test_published_builders() -> None:
    with torch.device("meta"):
        models = [gemma2.gemma2_2b(), gemma2.gemma2_9b(), gemma2.gemma2_27b()]
    for model in models:
        windows = [layer.attn.sliding_window for layer in model.layers]
        assert windows[:4] == [4096, None, 4096, None] and len(set(windows[::2])) == 1
        assert model.output is None and model.final_logit_softcap == 30.0
        assert {layer.attn.logit_softcap for layer in model.layers} == {50.0}
    assert [m.layers[0].attn.q_multiplier for m in models] == [1.0, 1.0, pytest.approx((128 / 144) ** 0.5)]
    assert [len(m.layers) for m in models] == [26, 42, 46]


GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


def test_tokenizer_is_token_exact_with_autotokenizer(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(replacement="▁")])
    corpus = ["Soft caps bend large logits.", "Local layers see a window; global layers see all."]
    tok.train_from_iterator(corpus * 3, trainer=trainers.BpeTrainer(vocab_size=150, special_tokens=specials))
    folder = tmp_path / "tok"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "chat_template": GEMMA_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    ours = gemma2.gemma2_tokenizer(folder / "tokenizer.model")  # torchtune's path: the json beside it
    reference = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    conversation = [Message("user", "Which are local?", masked=True), Message("assistant", "Even ones.")]
    tokens, mask = ours.tokenize_messages(conversation, add_eos=False)
    as_dicts = [{"role": m.role, "content": m.content} for m in conversation]
    expected = reference.apply_chat_template(as_dicts, tokenize=True, return_dict=True)["input_ids"]
    assert tokens == list(expected) and len(mask) == len(tokens) and tokens[0] == ours.token_to_id("<bos>")
    plain = reference("Soft caps.", add_special_tokens=False)["input_ids"]
    assert ours.encode("Soft caps.", add_eos=False) == plain
