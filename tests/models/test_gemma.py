"""The gemma family (first generation) against `transformers`' GemmaForCausalLM on tiny random models:
long sequences, the KV cache, packed documents, generation; a config.json without tie_word_embeddings
(as the releases write it) read as tied; the checkpointer round trip transformers loads; the tokenizer
against AutoTokenizer with Gemma's turn format; the published builders."""

import json
from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf
from safetensors.torch import load_file

from ftune.checkpointing import HFCheckpointer, load_hf
from ftune.data.messages import Message
from ftune.generation import generate
from ftune.models import builder_kwargs, gemma, model_from_hf_config
from ftune.modules.masks import document_causal_mask

transformers = pytest.importorskip("transformers")
VOCAB = 128
pytestmark = pytest.mark.usefixtures("one_thread")


def _tokens(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _pair(path: Path, **overrides) -> tuple[torch.nn.Module, torch.nn.Module]:
    hf = build_tiny_hf("gemma", **overrides)
    hf.save_pretrained(path)
    return hf, load_hf(path).eval()


def test_long_sequence_matches_transformers(tmp_path: Path) -> None:
    hf, model = _pair(tmp_path)
    tokens = _tokens((2, 160), seed=1)  # through the CPU block-skipping attention
    with torch.no_grad():
        assert (model(tokens) - hf(tokens).logits).abs().max().item() <= 1e-4


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
    hf, model = _pair(tmp_path)
    tokens = _tokens((14,), seed=3).tolist()
    with torch.no_grad():
        for _ in range(8):
            tokens.append(int(hf(torch.tensor([tokens])).logits[0, -1].argmax()))
    assert generate(model, tokens[:14], max_new_tokens=8) == tokens[14:]


@pytest.mark.parametrize("lengths", [(17, 23), (70, 90)])
def test_packed_documents_match_separate_runs(lengths: tuple[int, int], tmp_path: Path) -> None:
    hf, model = _pair(tmp_path)
    docs = [_tokens((1, n), seed=4 + i) for i, n in enumerate(lengths)]
    input_pos = torch.cat([torch.arange(n) for n in lengths])[None]
    doc_ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])[None]
    with torch.no_grad():
        got = model(torch.cat(docs, dim=1), input_pos=input_pos, mask=document_causal_mask(doc_ids))
        expected = torch.cat([hf(doc).logits for doc in docs], dim=1)
    assert (got - expected).abs().max().item() <= 1e-4


def test_gemma_specifics_change_the_logits() -> None:
    # Guards the parity tests against passing vacuously: the (1 + w) norms, the scaled embeddings and
    # the tanh GELU each change transformers' logits; zeroing ftune's norm weights changes ftune's.
    hf = build_tiny_hf("gemma")
    config = hf.config.to_dict()
    model = gemma.gemma(**builder_kwargs(config, "gemma"))
    model.load_state_dict(gemma.hf_to_ftune(hf.state_dict()))
    tokens = _tokens((1, 40), seed=6)
    with torch.no_grad():
        before = model(tokens)
        assert (before - hf(tokens).logits).abs().max() <= 1e-4
        for layer in model.layers:
            layer.attn_norm.weight.zero_()
        assert (model(tokens) - before).abs().max() > 1e-3  # (1 + 0) is not 0: still a model, but another
        tanh = build_tiny_hf("gemma", hidden_act="gelu_pytorch_tanh")(tokens).logits
        assert (tanh - hf(tokens).logits).abs().max() <= 1e-6  # "gelu" is read as the tanh GELU, like HF


def test_config_without_tie_word_embeddings_is_tied(tmp_path: Path) -> None:
    config = build_tiny_hf("gemma").config.to_dict()
    config.pop("tie_word_embeddings")
    family, model = model_from_hf_config(config, device="meta")
    assert family == "gemma" and model.output is None


def test_unsupported_activation_is_refused() -> None:
    config = {**build_tiny_hf("gemma").config.to_dict(), "hidden_act": "relu"}
    with pytest.raises(ValueError, match="hidden_act='relu'.*ftune's GeGLU uses 'gelu_pytorch_tanh'"):
        model_from_hf_config(config, device="meta")


def test_checkpointer_round_trip_is_exact_and_loads_in_transformers(tmp_path: Path) -> None:
    hf = build_tiny_hf("gemma")
    hf.save_pretrained(tmp_path / "in")
    ckpt = HFCheckpointer(tmp_path / "in", tmp_path / "out")
    loaded = ckpt.load()
    assert loaded.family == "gemma" and "output.weight" not in loaded.model
    out = ckpt.save(1, loaded.model)
    saved, original = load_file(out / "model.safetensors"), load_file(tmp_path / "in" / "model.safetensors")
    assert saved.keys() == original.keys() and all(torch.equal(saved[k], original[k]) for k in original)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokens = _tokens((2, 24), seed=7)
    with torch.no_grad():
        assert torch.equal(reloaded(tokens).logits, hf(tokens).logits)


def test_published_builders() -> None:
    with torch.device("meta"):
        two, seven = gemma.gemma_2b(), gemma.gemma_7b()
    assert [m.layers[0].attn.num_kv_heads for m in (two, seven)] == [1, 16]
    assert [m.layers[0].attn.head_dim for m in (two, seven)] == [256, 256]
    assert (
        two.output is None and seven.output is None and seven.tok_embeddings.weight.shape == (256_000, 3072)
    )


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
    corpus = ["The quick brown fox jumps over the lazy dog.", "What is the capital of France? Paris."]
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
    ours = gemma.gemma_tokenizer(folder / "tokenizer.model")  # torchtune's path: the tokenizer.json beside it
    reference = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    conversation = [Message("user", "What is the capital?", masked=True), Message("assistant", "Paris.")]
    tokens, mask = ours.tokenize_messages(conversation, add_eos=False)
    as_dicts = [{"role": m.role, "content": m.content} for m in conversation]
    expected = reference.apply_chat_template(as_dicts, tokenize=True, return_dict=True)["input_ids"]
    assert tokens == list(expected) and len(mask) == len(tokens) and tokens[0] == ours.token_to_id("<bos>")
    assert (
        ours.encode("The fox.", add_eos=False) == reference("The fox.", add_special_tokens=False)["input_ids"]
    )
