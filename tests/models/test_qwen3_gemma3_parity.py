"""Qwen3 and Gemma 3 against `transformers` beyond the shared parity test: long sequences through
the CPU block-skipping attention, the KV-cache (generation) path, packed documents, Gemma 3's
config.json layouts and its unsupported options."""

from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import GEMMA3_TINY, build_tiny_hf

from ftune.checkpointing import load_hf
from ftune.generation import generate
from ftune.models import model_from_hf_config
from ftune.models.gemma3._hf_config import gemma3_builder_kwargs
from ftune.modules.masks import document_causal_mask

FAMILIES = ["qwen3", "gemma3"]
VOCAB = 128


# Small forwards: one thread (tests/conftest.py `one_thread`).
pytestmark = pytest.mark.usefixtures("one_thread")


def _tokens(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _pair(family: str, path: Path, **overrides) -> tuple[torch.nn.Module, torch.nn.Module]:
    hf = build_tiny_hf(family, **overrides)
    hf.save_pretrained(path)
    return hf, load_hf(path).eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_long_sequence_through_cpu_block_attention(family: str, tmp_path: Path) -> None:
    # 160 tokens >= 2 query blocks: the CPU path that skips masked (query, key) blocks, here with
    # Gemma's sliding window (6) in the local layers.
    hf, model = _pair(family, tmp_path)
    tokens = _tokens((2, 160), seed=1)
    with torch.no_grad():
        diff = (model(tokens) - hf(tokens).logits).abs().max().item()
    assert diff <= 1e-4, diff


@pytest.mark.parametrize("family", FAMILIES)
def test_kv_cache_steps_match_transformers(family: str, tmp_path: Path) -> None:
    # Prefill 20 tokens (longer than Gemma's window of 6), then decode 12 more one at a time through
    # the cache; every step's logits equal transformers' on the whole sequence.
    hf, model = _pair(family, tmp_path)
    tokens = _tokens((1, 32), seed=2)
    with torch.no_grad():
        expected = hf(tokens).logits[0]  # (32, vocab)
        model.setup_caches(batch_size=1, max_seq_len=48)
        prefill = model(tokens[:, :20], input_pos=torch.arange(20)[None])[0]
        steps = [model(tokens[:, i : i + 1], input_pos=torch.tensor([[i]]))[0, 0] for i in range(20, 32)]
    got = torch.cat([prefill, torch.stack(steps)])
    diff = (got - expected).abs().max().item()
    assert diff <= 1e-4, diff


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_generation_matches_transformers(family: str, tmp_path: Path) -> None:
    # ftune's generate (KV cache) against greedy decoding that reruns transformers' full forward at
    # every step. (transformers' own `generate` is not the reference: for this tiny Qwen3 its cached
    # path already departs from its full forward at the second new token, in transformers 5.24.)
    hf, model = _pair(family, tmp_path)
    tokens = _tokens((14,), seed=3).tolist()
    with torch.no_grad():
        for _ in range(6):
            tokens.append(int(hf(torch.tensor([tokens])).logits[0, -1].argmax()))
    assert generate(model, tokens[:14], max_new_tokens=6) == tokens[14:]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("lengths", [(17, 23), (70, 90)])  # (70, 90): through the CPU block path
def test_packed_documents_match_separate_runs(family: str, lengths: tuple[int, int], tmp_path: Path) -> None:
    hf, model = _pair(family, tmp_path)
    docs = [_tokens((1, n), seed=4 + i) for i, n in enumerate(lengths)]
    tokens = torch.cat(docs, dim=1)
    input_pos = torch.cat([torch.arange(n) for n in lengths])[None]
    doc_ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])[None]
    with torch.no_grad():
        got = model(tokens, input_pos=input_pos, mask=document_causal_mask(doc_ids))
        expected = torch.cat([hf(doc).logits for doc in docs], dim=1)
    diff = (got - expected).abs().max().item()
    assert diff <= 1e-4, diff


@pytest.mark.parametrize(
    "change",
    [
        dict(sliding_window=64),
        dict(query_pre_attn_scalar=16),
        dict(
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
            }
        ),
        dict(
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
            }
        ),
    ],
    ids=["window", "query_pre_attn_scalar", "rope_scaling", "local_rope_base"],
)
def test_each_gemma3_option_changes_the_logits(change: dict) -> None:
    # Guards the parity tests against passing vacuously: every Gemma-specific number they exercise
    # changes transformers' logits on a 40-token sequence.
    tokens = _tokens((1, 40), seed=6)
    with torch.no_grad():
        diff = (
            build_tiny_hf("gemma3")(tokens).logits - build_tiny_hf("gemma3", **change)(tokens).logits
        ).abs()
    assert diff.max() > 1e-3


def test_gemma3_v4_config_layout_builds_the_same_model(tmp_path: Path) -> None:
    # transformers 4.x wrote rope_theta / rope_local_base_freq / rope_scaling / sliding_window_pattern
    # where 5.x writes rope_parameters per layer type and layer_types.
    v5 = build_tiny_hf("gemma3").config.to_dict()
    v4 = {k: v for k, v in v5.items() if k not in ("rope_parameters", "layer_types")}
    v4.update(
        rope_theta=1_000_000.0,
        rope_local_base_freq=10_000.0,
        rope_scaling={"type": "linear", "factor": 8.0},
        sliding_window_pattern=2,  # layers: local, global, local, as GEMMA3_TINY's layer_types
    )
    new, old = gemma3_builder_kwargs(v5), gemma3_builder_kwargs(v4)
    assert new.pop("layer_types") == GEMMA3_TINY["layer_types"] and old.pop("sliding_window_pattern") == 2
    assert new == old
    _, a = model_from_hf_config(v5, device="meta")
    _, b = model_from_hf_config(v4, device="meta")
    for la, lb in zip(a.layers, b.layers, strict=True):
        assert la.attn.sliding_window == lb.attn.sliding_window
        assert torch.equal(la.attn.rope.inv_freq, lb.attn.rope.inv_freq)
    assert [layer.attn.sliding_window for layer in a.layers] == [6, None, 6]
    assert a.layers[0].attn.rope.base == 10_000.0 and a.layers[1].attn.rope.base == 1_000_000.0


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (dict(final_logit_softcapping=30.0), "final_logit_softcapping=30.0: no released Gemma 3 sets it"),
        (dict(attn_logit_softcapping=50.0), "attn_logit_softcapping=50.0"),
        (dict(hidden_activation="gelu"), "hidden_activation='gelu': ftune's GeGLU uses 'gelu_pytorch_tanh'"),
        (dict(use_bidirectional_attention=True), "use_bidirectional_attention=true"),
        (
            dict(rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6}}),
            "global RoPE of type 'yarn'; ftune supports 'default' and 'linear'",
        ),
    ],
)
def test_gemma3_unsupported_options_raise(change: dict, match: str) -> None:
    config = {**build_tiny_hf("gemma3").config.to_dict(), **change}
    with pytest.raises(ValueError, match=match):
        model_from_hf_config(config, device="meta")
