"""A LoRA reference pass leaves the policy's router state, and so its aux loss, as the policy's forward left it.

A LoRA reference (`ReferenceModel.adapters_off`) reruns the policy's own mixture-of-experts blocks
with the adapters off; with non-zero adapters it routes differently. `with_aux_loss`, called after
it, must still read the router logits of the policy's forward: the same aux loss as right after
that forward, with its gradient to the routers, entering the loss once (``coef * count * aux``).
A mutant without `keep_router_state` (the reference pass overwrites the router logits) fails.
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch

import ftune.training.methods.reference as reference_module
from ftune.models.mixtral import mixtral
from ftune.models.qwen3_moe import qwen3_moe
from ftune.peft import apply_lora
from ftune.training import DPOLoss, GRPOLoss, ReferenceModel, on_device, preference_loss
from ftune.training.step.aux_loss import with_aux_loss
from ftune.training.step.metric import Loss
from ftune.training.step.micro_batch import real_tokens

VOCAB, COEF = 96, 0.5
COMMON = dict(vocab_size=VOCAB, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32, max_seq_len=64)
BUILD = {
    "qwen3_moe": lambda: qwen3_moe(
        **COMMON,
        intermediate_dim=64,
        moe_intermediate_dim=16,
        num_experts=8,
        top_k=2,
        head_dim=8,
        aux_loss_coef=COEF,
    ),
    "mixtral": lambda: mixtral(**COMMON, intermediate_dim=16, num_experts=8, top_k=2, aux_loss_coef=COEF),
}


def _policy(family: str) -> torch.nn.Module:
    """A seeded tiny MoE with LoRA on attention and every expert, its adapters non-zero (B random)."""
    torch.manual_seed(0)
    model = BUILD[family]()
    apply_lora(model, targets=["q_proj", "v_proj", "experts"], rank=4, alpha=8)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_b" in name:
                p.normal_(0.0, 0.5)
    for block in model.moe_blocks():  # trained, as in a full fine-tune, to see the term's gradient
        block.gate.weight.requires_grad_(True)
    return model


def _pairs() -> object:
    """A preference micro-batch: 2 chosen rows, then their 2 rejected rows (the second pair right-padded)."""
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, VOCAB, (4, 14), generator=gen)
    labels = tokens.clone()
    labels[:, :5] = -100  # the prompt
    tokens[[1, 3], -3:], labels[[1, 3], -3:] = 0, -100
    return on_device({"tokens": tokens, "labels": labels}, torch.device("cpu"))


def _router_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([b.gate.weight.grad.flatten() for b in model.moe_blocks()])


def check_reference_keeps_the_policy_aux(family: str, method: str) -> None:
    model, batch = _policy(family), _pairs()
    hidden = model.hidden(batch.tokens)  # the policy's forward: (rows, s, dim)
    policy_routing = [r.detach().clone() for r in model.router_logits()]
    want = model.aux_loss(real_tokens(batch)).item()
    reference, seen = ReferenceModel.adapters_off(model), []

    def score(head, h):  # also records the routing of the reference pass
        seen.extend(r.clone() for r in model.router_logits())
        return DPOLoss("sigmoid", beta=0.1).row_logps(head, h, batch.labels)

    reference.scores(batch, score)
    if method == "dpo":
        loss_fn = DPOLoss("sigmoid", beta=0.1)
        pairs = reference.row_logps(loss_fn, batch)  # the reference pass the recipe runs

        def loss_now() -> Loss:
            return preference_loss(loss_fn, model, hidden, batch, pairs)
    else:
        grpo = GRPOLoss("grpo", epsilon=0.2, epsilon_high=None, beta=0.04, max_completion_length=None)
        assert reference.token_logps(grpo, batch, temperature=1.0) is not None

        def loss_now() -> Loss:  # what grpo_loss ends with, on a stand-in policy loss
            return with_aux_loss(model, batch, Loss((hidden * 0.0).sum(), 8, {}))

    assert any(not torch.allclose(a, b) for a, b in zip(seen, policy_routing)), "the reference routed alike"
    loss = loss_now()
    assert loss.metrics["aux_loss"].value() == pytest.approx(want, rel=1e-6)
    # Once: the loss with the term minus the loss without it is coef * count * aux, not twice that.
    model.aux_loss_coef = 0.0
    base = loss_now()
    model.aux_loss_coef = COEF
    assert (loss.sum - base.sum).item() == pytest.approx(COEF * loss.count * want, rel=1e-5)
    (loss.sum - base.sum).backward()  # the term alone: its gradient reaches the policy forward's routers
    assert _router_grad(model).abs().max() > 0


@pytest.mark.parametrize("method", ["dpo", "grpo"])
@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_the_reference_pass_leaves_the_policy_aux_loss(family, method):
    check_reference_keeps_the_policy_aux(family, method)


@pytest.mark.parametrize("family", ["qwen3_moe", "mixtral"])
def test_a_reference_that_overwrites_the_router_state_fails_the_check(family, monkeypatch):
    monkeypatch.setattr(reference_module, "keep_router_state", lambda model: nullcontext())
    with pytest.raises(AssertionError):
        check_reference_keeps_the_policy_aux(family, "dpo")
