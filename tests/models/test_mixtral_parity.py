"""Mixtral against transformers' MixtralForCausalLM (its per-expert loop) on a tiny random model with
a sliding window shorter than the sequences: logits with and without the KV cache, packed documents,
the router's choices, the load-balancing loss, every gradient (the stacked experts' included), and
the router's training-only jitter noise."""

from pathlib import Path

import pytest
import torch
from ftune_tiny_hf import build_tiny_hf

from ftune.checkpointing import load_hf
from ftune.modules.masks import document_causal_mask
from ftune.modules.moe import MoETransformerDecoder
from ftune.training import apply_activation_checkpointing

VOCAB = 128
pytestmark = pytest.mark.usefixtures("one_thread")


def _tokens(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _pair(path: Path, **overrides) -> tuple[torch.nn.Module, MoETransformerDecoder]:
    hf = build_tiny_hf("mixtral", **overrides)
    hf.save_pretrained(path)
    model = load_hf(path).eval()
    assert isinstance(model, MoETransformerDecoder)
    return hf, model


def test_logits_router_choices_and_aux_loss_match(tmp_path: Path) -> None:
    hf, model = _pair(tmp_path)
    assert model.layers[0].attn.sliding_window == 24 and model.layers[0].mlp.gate.norm_topk_prob
    tokens = _tokens((2, 48), seed=1)
    with torch.no_grad():
        out = hf(tokens, output_router_logits=True)
        got = model(tokens)
    assert (got - out.logits).abs().max().item() <= 1e-4
    ours = model.router_logits()
    assert len(ours) == len(out.router_logits) == 2
    for a, b in zip(ours, out.router_logits, strict=True):
        assert (a - b).abs().max().item() <= 1e-5
        assert torch.equal(a.topk(2).indices, b.topk(2).indices)  # the same experts for every token
    assert model.aux_loss().item() == pytest.approx(out.aux_loss.item(), abs=1e-6)
    assert out.aux_loss.item() > 2.0  # top_k at perfect balance: random routers are not balanced


def test_aux_loss_with_padding_mask_matches(tmp_path: Path) -> None:
    hf, model = _pair(tmp_path)
    tokens = _tokens((2, 40), seed=2)
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, 25:] = 0
    with torch.no_grad():
        expected = hf(tokens, attention_mask=mask, output_router_logits=True).aux_loss
        model(tokens)
    assert model.aux_loss(mask).item() == pytest.approx(expected.item(), abs=1e-6)
    assert model.aux_loss(mask).item() != pytest.approx(model.aux_loss().item(), abs=1e-4)


def test_kv_cache_steps_match_transformers(tmp_path: Path) -> None:
    # Prefill 24 tokens, then 20 decoding steps through the cache: 44 positions, past the window.
    hf, model = _pair(tmp_path)
    tokens = _tokens((1, 44), seed=3)
    with torch.no_grad():
        expected = hf(tokens).logits[0]
        model.setup_caches(batch_size=1, max_seq_len=64)
        prefill = model(tokens[:, :24], input_pos=torch.arange(24)[None])[0]
        steps = [model(tokens[:, i : i + 1], input_pos=torch.tensor([[i]]))[0, 0] for i in range(24, 44)]
    got = torch.cat([prefill, torch.stack(steps)])
    assert (got - expected).abs().max().item() <= 1e-4


def test_packed_documents_match_separate_runs(tmp_path: Path) -> None:
    # The second document (29 tokens) is longer than the window (24): both masks apply.
    hf, model = _pair(tmp_path)
    lengths = (17, 29)
    docs = [_tokens((1, n), seed=4 + i) for i, n in enumerate(lengths)]
    input_pos = torch.cat([torch.arange(n) for n in lengths])[None]
    doc_ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])[None]
    with torch.no_grad():
        got = model(torch.cat(docs, dim=1), input_pos=input_pos, mask=document_causal_mask(doc_ids))
        expected = torch.cat([hf(doc).logits for doc in docs], dim=1)
    assert (got - expected).abs().max().item() <= 1e-4


def _hf_name(ftune_name: str) -> str:
    """ftune parameter name -> transformers 5's in-memory name (fused experts, `mlp`: a rename)."""
    renames = {
        "tok_embeddings.": "model.embed_tokens.",
        "attn_norm.": "input_layernorm.",
        "mlp_norm.": "post_attention_layernorm.",
        ".attn.": ".self_attn.",
        "output.": "lm_head.",
    }
    name = ftune_name
    for a, b in renames.items():
        name = name.replace(a, b)
    if name.startswith("layers.") or name.startswith("norm."):
        name = "model." + name
    return name


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "activation_checkpointing"])
def test_gradients_match_transformers(tmp_path: Path, checkpointing: bool) -> None:
    # Cross-entropy plus 0.1 x the aux loss, backward in both; every gradient compared, the stacked
    # experts' and the router's included.
    hf, model = _pair(tmp_path, router_aux_loss_coef=0.1)
    model.train()
    if checkpointing:
        assert apply_activation_checkpointing(model) == 2
    tokens = _tokens((2, 40), seed=5)
    out = hf(tokens, labels=tokens, output_router_logits=True)  # loss += 0.1 * aux_loss
    out.loss.backward()
    logits = model(tokens)
    ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    (ce + model.aux_loss_coef * model.aux_loss()).backward()
    assert model.aux_loss_coef == 0.1
    hf_params = dict(hf.named_parameters())
    for name, p in model.named_parameters():
        expected = hf_params[_hf_name(name)].grad
        assert p.grad is not None and expected is not None, name
        assert p.grad.shape == expected.shape, name
        err = ((p.grad - expected).abs().max() / expected.abs().max().clamp_min(1e-12)).item()
        assert err <= 1e-5, (name, err)  # measured: at most 4.4e-7 of the largest entry (experts 3.8e-7)
    assert model.layers[0].mlp.experts.gate_up_proj.grad.abs().sum() > 0


def test_router_jitter_noise_matches_transformers_in_training(tmp_path: Path) -> None:
    # The noise multiplies the MoE block's input in training only; drawn from the same generator in
    # the same order, both models compute the same jittered forward.
    hf, model = _pair(tmp_path, router_jitter_noise=0.3)
    assert model.layers[0].mlp.jitter_noise == 0.3
    hf.train()
    model.train()
    tokens = _tokens((2, 40), seed=6)
    with torch.no_grad():
        torch.manual_seed(123)
        expected = hf(tokens).logits
        torch.manual_seed(123)
        got = model(tokens)
        torch.manual_seed(124)
        other_noise = model(tokens)
        model.eval()
        plain = model(tokens)
    assert (got - expected).abs().max().item() <= 1e-4
    assert (got - other_noise).abs().max().item() > 1e-3  # the noise is on
    assert (got - plain).abs().max().item() > 1e-3
    with torch.no_grad():
        hf.eval()
        assert (hf(tokens).logits - plain).abs().max().item() <= 1e-4  # and off in eval mode


def test_sliding_window_changes_the_logits(tmp_path: Path) -> None:
    # Guards the parity tests against passing vacuously: the window bites on 48 tokens.
    tokens = _tokens((1, 48), seed=7)
    with torch.no_grad():
        a = build_tiny_hf("mixtral")(tokens).logits
        b = build_tiny_hf("mixtral", sliding_window=None)(tokens).logits
    assert (a - b).abs().max() > 1e-3


def test_jitter_noise_is_redrawn_identically_under_activation_checkpointing() -> None:
    # Checkpointing recomputes each layer's forward in backward: the recomputed noise must be the
    # noise of the forward (torch.utils.checkpoint restores the RNG state), or the gradients drift.
    from ftune.models.mixtral import mixtral

    def grads(checkpointing: bool) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        model = mixtral(
            vocab_size=VOCAB, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=32,
            max_seq_len=64, jitter_noise=0.3,
        )  # fmt: skip
        if checkpointing:
            apply_activation_checkpointing(model)
        tokens = _tokens((2, 24), seed=8)
        torch.manual_seed(9)
        logits = model(tokens)
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        (ce + model.aux_loss()).backward()
        return {n: p.grad for n, p in model.named_parameters()}

    plain, checkpointed = grads(False), grads(True)
    for name, grad in plain.items():
        assert torch.allclose(checkpointed[name], grad, rtol=0, atol=1e-6), name


def test_bf16_moe_block_is_bit_equal_to_transformers_grouped_mm(tmp_path: Path) -> None:
    # transformers' default experts kernel weights Mixtral's expert outputs by fp32 mixing weights
    # and sums them in fp32 before rounding; ftune's Mixtral router hands out fp32 weights to match.
    hf = build_tiny_hf("mixtral", experts_implementation="grouped_mm")
    hf.save_pretrained(tmp_path)
    hf = hf.to(torch.bfloat16)
    model = load_hf(tmp_path, dtype=torch.bfloat16).eval()
    x = torch.randn(2, 48, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    block = model.layers[0].mlp
    assert block.gate.fp32_weights
    with torch.no_grad():
        expected = hf.model.layers[0].mlp(x.clone())
        assert torch.equal(block(x), expected)
        block.gate.fp32_weights = False  # rounding the weights first (Qwen3-MoE's way) differs
        assert not torch.equal(block(x), expected)
