"""Each family against `transformers` on a tiny random model: logits and state-dict round trip."""

from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import TINY_HF, build_tiny_hf
from safetensors.torch import load_file

from ftune.checkpointing import load_hf
from ftune.models import CONVERTERS, FAMILIES, SAME_ARCHITECTURE, family_from_hf_config


def test_every_family_has_a_tiny_parity_config() -> None:
    assert sorted(TINY_HF) == sorted(FAMILIES) == sorted(CONVERTERS)


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(family: str, tmp_path: Path) -> None:
    hf = build_tiny_hf(family)
    hf.save_pretrained(tmp_path)
    model = load_hf(tmp_path)
    assert family_from_hf_config(hf.config.to_dict()) == SAME_ARCHITECTURE.get(family, family)
    assert (model.output is None) == TINY_HF[family][1].get("tie_word_embeddings", False)

    tokens = torch.randint(0, 128, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(tokens).logits
        got = model(tokens)
    assert got.shape == expected.shape == (2, 40, 128)
    assert torch.isfinite(expected).all()
    assert (got - expected).abs().max().item() <= 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_ftune_to_hf_gives_back_the_saved_state_dict(family: str, tmp_path: Path) -> None:
    hf = build_tiny_hf(family)
    hf.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    conv = CONVERTERS[family]

    back = conv.ftune_to_hf(load_hf(tmp_path).state_dict())
    assert back.keys() == saved.keys()
    for key, value in saved.items():
        assert torch.equal(back[key], value), key

    if family in ("qwen3_moe", "mixtral"):
        return  # fused experts in memory, per expert on disk: tests/models/test_<family>_convert.py
    # `model.state_dict()` of a tied transformers model lists lm_head.weight as an alias of the
    # embeddings; the converter recognises the alias and drops it, everything else round-trips.
    live = {k: v for k, v in hf.state_dict().items()}
    ftune_sd = conv.hf_to_ftune(live)
    assert ("output.weight" in ftune_sd) != hf.config.tie_word_embeddings
    again = conv.ftune_to_hf(ftune_sd)
    expected_keys = live.keys() - ({"lm_head.weight"} if hf.config.tie_word_embeddings else set())
    assert again.keys() == expected_keys
    for key in expected_keys:
        if key.endswith(("qkv_proj.weight", "gate_up_proj.weight")):  # phi3/phi4: split, then fused again
            assert torch.equal(again[key], live[key]), key
        else:
            assert again[key] is live[key], key  # pure rename: the very same tensors


def test_rope_scaling_is_active_in_llama3_1(tmp_path: Path) -> None:
    # Guards the parity test against passing vacuously: the scaled and unscaled models differ.
    scaled = build_tiny_hf("llama3_1")
    plain = build_tiny_hf("llama3_1", rope_scaling=None)
    scaled.save_pretrained(tmp_path / "scaled")
    plain.save_pretrained(tmp_path / "plain")
    tokens = torch.randint(0, 128, (1, 64), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        diff = (load_hf(tmp_path / "scaled")(tokens) - load_hf(tmp_path / "plain")(tokens)).abs().max()
    assert diff > 1e-3


@pytest.mark.parametrize("seq_len", [40, 160])  # 160: also through the CPU block-skipping attention
def test_mistral_sliding_window_matches_transformers(seq_len: int, tmp_path: Path) -> None:
    hf = build_tiny_hf("mistral", sliding_window=6, max_position_embeddings=256)
    hf.save_pretrained(tmp_path)
    model = load_hf(tmp_path)
    assert {layer.attn.sliding_window for layer in model.layers} == {6}
    tokens = torch.randint(0, 128, (2, seq_len), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(tokens).logits
        got = model(tokens)
        full_context = build_tiny_hf("mistral", max_position_embeddings=256)(tokens).logits
    assert (got - expected).abs().max().item() <= 1e-4
    assert (full_context - expected).abs().max().item() > 1e-2  # the window changes the result


def test_mistral_sliding_window_with_kv_cache(tmp_path: Path) -> None:
    from ftune.generation import generate

    build_tiny_hf("mistral", sliding_window=6, max_position_embeddings=256).save_pretrained(tmp_path)
    model = load_hf(tmp_path)
    prompt = list(range(3, 23))  # longer than the window
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            tokens.append(int(model(torch.tensor([tokens]))[0, -1].argmax()))
    assert generate(model, prompt, max_new_tokens=8) == tokens[len(prompt) :]
