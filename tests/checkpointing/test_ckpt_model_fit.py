"""check_fits / load_into / check_tokenizer_fits: strict loading with messages naming tensors and shapes."""

import pytest
import torch

from ftune.checkpointing import Loaded, check_fits, check_tokenizer_fits, load_into
from ftune.models.llama3 import llama3
from ftune.peft import apply_lora

SIZES = dict(
    vocab_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    embed_dim=32,
    intermediate_dim=64,
    max_seq_len=64,
)


def _state(seed: int = 0, **overrides) -> dict:
    torch.manual_seed(seed)
    return llama3(**{**SIZES, **overrides}).state_dict()


def test_shape_mismatch_names_tensor_and_both_shapes() -> None:
    with pytest.raises(
        ValueError,
        match=r"tensor\(s\) in the checkpoint do not fit the model: layers\.0\.mlp\.gate_proj\.weight: checkpoint "
        r"has shape \(48, 32\), model expects \(64, 32\);.*pick the model builder that matches it",
    ):
        check_fits(llama3(**SIZES), _state(intermediate_dim=48))


def test_missing_and_unexpected_keys() -> None:
    state = _state()
    del state["norm.weight"]
    with pytest.raises(
        ValueError, match=r"1 tensor\(s\) of the model are missing from the checkpoint: norm\.weight\."
    ):
        check_fits(llama3(**SIZES), state)
    state = {**_state(), "layers.0.attn.q_proj.lora_a.weight": torch.zeros(2, 32)}
    with pytest.raises(
        ValueError,
        match=r"1 tensor\(s\) in the checkpoint have no place in the model: "
        r"layers\.0\.attn\.q_proj\.lora_a\.weight\. If they are adapter weights, apply the same LoRA",
    ):
        check_fits(llama3(**SIZES), state)


def test_fresh_lora_run_allows_missing_adapters_only_when_asked() -> None:
    model = llama3(**SIZES)
    apply_lora(model, targets=["q_proj"], rank=2, alpha=4.0)
    base = _state(seed=1)
    with pytest.raises(
        ValueError,
        match=r"4 tensor\(s\) of the model are missing.*These are adapter weights: on a fresh "
        r"LoRA run they start from their initial values \(allow_missing_adapters=True\)",
    ):
        load_into(model, base)
    load_into(model, base, allow_missing_adapters=True)
    assert torch.equal(model.layers[1].attn.q_proj.weight, base["layers.1.attn.q_proj.weight"])
    # A Loaded without adapter is a fresh run: allowed by default.
    load_into(model, Loaded(model=base, adapter=None, recipe_state=None, family="llama3", step_dir=None))


def test_load_into_meta_model_assigns_without_copy() -> None:
    state = _state(seed=2)
    with torch.device("meta"):
        model = llama3(**SIZES)
    load_into(model, state)
    assert model.tok_embeddings.weight.data_ptr() == state["tok_embeddings.weight"].data_ptr()
    assert not any(p.is_meta for p in model.parameters())


def test_tokenizer_larger_than_embedding_names_the_file() -> None:
    model = llama3(**SIZES)
    check_tokenizer_fits(100, model)  # smaller is fine (padded vocabularies)
    with pytest.raises(
        ValueError,
        match=r"tokenizer '/ckpt/tokenizer\.json' has 130 tokens but the model's embedding \(tok_embeddings\.weight\) "
        r"has only 128 rows, so ids >= 128 would index out of range",
    ):
        check_tokenizer_fits(130, model, tokenizer_path="/ckpt/tokenizer.json")
