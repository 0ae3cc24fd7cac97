"""DPOLoss (sigmoid, IPO, SimPO): losses, rewards and gradients against the formulas written out here and
against TRL's own loss code on the same log-probabilities; the chunked sequence log-probabilities;
the reference pass with adapters switched off."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from trl_losses import trl_dpo, trl_simpo

from ftune.models.smollm2 import smollm2
from ftune.modules.transformer import OutputHead
from ftune.peft import adapters_disabled, apply_lora
from ftune.training import DPOLoss, PairLogps, ReferenceModel, StepLoss, on_device, per_pair, preference_loss
from ftune.training.methods.logps import sequence_logps

B, S = 3, 9


def _inputs(seed=0):
    """Per-token policy log-probs [2B, S-1] (a leaf), TRL's completion mask [2B, S], reference sums [B] x 2."""
    g = torch.Generator().manual_seed(seed)
    raw = (-torch.rand(2 * B, S - 1, generator=g) * 3).requires_grad_()
    mask = torch.zeros(2 * B, S, dtype=torch.long)
    for row, start in enumerate([2, 4, 3, 5, 1, 6]):  # answers of different lengths, never at position 0
        mask[row, start:] = 1
    ref = -torch.rand(2 * B, generator=g) * 10
    return raw, mask, ref[:B], ref[B:]


def _ours(loss_type, raw, mask, ref_c, ref_r, **kw):
    per_token = raw * mask[:, 1:]
    policy = PairLogps.from_rows(per_token.sum(1), mask[:, 1:].sum(1))
    reference = (
        None
        if loss_type == "simpo"
        else PairLogps(ref_c, ref_r, policy.chosen_tokens, policy.rejected_tokens)
    )
    return DPOLoss(loss_type, **kw)(policy, reference), policy


def _log_sigmoid(x):
    return -torch.log1p(torch.exp(-x))


def _formula(loss_type, policy, ref_c, ref_r, beta, gamma=None, eps=0.0):
    """The papers' per-pair losses and the logged rewards, written from the formulas."""
    pc, pr, nc, nr = policy.chosen, policy.rejected, policy.chosen_tokens, policy.rejected_tokens
    if loss_type == "simpo":
        rc, rr = beta * pc / nc, beta * pr / nr
        h = rc - rr - gamma
        return -(1 - eps) * _log_sigmoid(h) - eps * _log_sigmoid(-h), rc, rr
    rc, rr = beta * (pc - ref_c), beta * (pr - ref_r)
    if loss_type == "sigmoid":
        h = rc - rr
        return -(1 - eps) * _log_sigmoid(h) - eps * _log_sigmoid(-h), rc, rr
    h = (pc - ref_c) / nc - (pr - ref_r) / nr
    return (h - 1 / (2 * beta)) ** 2, rc, rr


CASES = [
    ("sigmoid", dict(beta=0.1)),
    ("sigmoid", dict(beta=0.5, label_smoothing=0.2)),
    ("ipo", dict(beta=0.1)),
    ("simpo", dict(beta=2.0, gamma=0.5)),
    ("simpo", dict(beta=2.0, gamma=0.5, label_smoothing=0.1)),
]


@pytest.mark.parametrize("loss_type, kw", CASES)
def test_losses_rewards_and_gradients_equal_the_formula(loss_type, kw):
    raw, mask, ref_c, ref_r = _inputs()
    out, policy = _ours(loss_type, raw, mask, ref_c, ref_r, **kw)
    (grad,) = torch.autograd.grad(out.losses.mean(), raw)
    raw2 = raw.detach().clone().requires_grad_()
    _, policy2 = _ours(loss_type, raw2, mask, ref_c, ref_r, **kw)
    want, want_c, want_r = _formula(
        loss_type, policy2, ref_c, ref_r, kw["beta"], kw.get("gamma"), kw.get("label_smoothing", 0.0)
    )
    (want_grad,) = torch.autograd.grad(want.mean(), raw2)
    torch.testing.assert_close(out.losses, want.detach())
    torch.testing.assert_close(out.chosen_rewards, want_c.detach())
    torch.testing.assert_close(out.rejected_rewards, want_r.detach())
    torch.testing.assert_close(grad, want_grad)
    assert grad.abs().sum() > 0 and (grad[mask[:, 1:] == 0] == 0).all()  # only answer tokens get gradient


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_dpo_and_ipo_equal_trl(loss_type):
    raw, mask, ref_c, ref_r = _inputs(seed=1)
    beta = 0.1
    out, _ = _ours(loss_type, raw, mask, ref_c, ref_r, beta=beta)
    (grad,) = torch.autograd.grad(out.losses.mean(), raw)
    raw_trl = raw.detach().clone().requires_grad_()
    loss, metrics = trl_dpo(loss_type, beta, raw_trl * mask[:, 1:], mask, ref_c, ref_r)
    (grad_trl,) = torch.autograd.grad(loss, raw_trl)
    torch.testing.assert_close(out.losses.mean(), loss)
    torch.testing.assert_close(grad, grad_trl)
    ours = {k: m.value() for k, m in out.metrics().items()}
    assert ours["rewards/chosen"] == pytest.approx(metrics["rewards/chosen"], rel=1e-6)
    assert ours["rewards/rejected"] == pytest.approx(metrics["rewards/rejected"], rel=1e-6)
    assert ours["rewards/margin"] == pytest.approx(metrics["rewards/margins"], rel=1e-6)
    assert ours["rewards/accuracy"] == pytest.approx(metrics["rewards/accuracies"])


def test_simpo_equals_trl():
    raw, mask, _, _ = _inputs(seed=2)
    beta, gamma, eps = 2.0, 0.5, 0.1
    out, policy = _ours("simpo", raw, mask, None, None, beta=beta, gamma=gamma, label_smoothing=eps)
    (grad,) = torch.autograd.grad(out.losses.mean(), raw)
    raw_trl = raw.detach().clone().requires_grad_()
    sums = (raw_trl * mask[:, 1:]).sum(1)
    avg = sums / mask[:, 1:].sum(1)  # CPO with average_log_prob (what SimPO uses)
    losses, chosen, rejected = trl_simpo(beta, gamma, eps, avg[:B], avg[B:])
    (grad_trl,) = torch.autograd.grad(losses.mean(), raw_trl)
    torch.testing.assert_close(out.losses, losses)
    torch.testing.assert_close(out.chosen_rewards, chosen)
    torch.testing.assert_close(out.rejected_rewards, rejected)
    torch.testing.assert_close(grad, grad_trl)


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="loss_type must be one of"):
        DPOLoss("kto", beta=0.1)
    with pytest.raises(ValueError, match="gamma"):
        DPOLoss("simpo", beta=2.0)
    with pytest.raises(ValueError, match="gamma"):
        DPOLoss("sigmoid", beta=0.1, gamma=0.5)
    with pytest.raises(ValueError, match="label_smoothing"):
        DPOLoss("ipo", beta=0.1, label_smoothing=0.1)
    with pytest.raises(ValueError, match="beta"):
        DPOLoss("sigmoid", beta=0.0)


@pytest.mark.parametrize("num_chunks", [1, 3])
def test_sequence_logps_equal_full_log_softmax(num_chunks):
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(50, 8, generator=g, requires_grad=True)
    hidden = torch.randn(4, 6, 8, generator=g, requires_grad=True)
    labels = torch.randint(0, 50, (4, 6), generator=g)
    labels[0, :3] = -100
    labels[2] = -100  # a row without labels sums to 0
    logps, counts = sequence_logps(OutputHead(weight, None), hidden, labels, num_chunks=num_chunks)
    full = F.log_softmax(F.linear(hidden, weight), dim=-1)  # (4, 6, 50)
    picked = full.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1) * (labels != -100)
    torch.testing.assert_close(logps, picked.sum(1))
    assert counts.tolist() == [3, 6, 0, 6]
    g1 = torch.autograd.grad(logps.sum(), (weight, hidden))
    g2 = torch.autograd.grad(picked.sum(), (weight, hidden))
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)


def _tiny_model():
    torch.manual_seed(0)
    model = smollm2(
        vocab_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        embed_dim=32,
        intermediate_dim=64,
        max_seq_len=64,
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    return model


def _batch():
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 64, (2 * B, 12), generator=g)
    labels = tokens.clone()
    labels[:, :4] = -100
    labels[1, 9:] = -100  # padding
    return {"tokens": tokens, "labels": labels}


def _loss_on(model, loss_fn, reference):
    """The DPO recipes' loss_on: the reference's logps, the policy's forward, then preference_loss."""

    def loss_on(batch):
        batch = on_device(batch, torch.device("cpu"))
        reference_logps = reference.row_logps(loss_fn, batch)
        hidden = model.hidden(batch.tokens, input_pos=batch.input_pos, mask=batch.mask)
        return preference_loss(loss_fn, model, hidden, batch, reference_logps)

    return loss_on


def test_lora_reference_is_the_base_model_without_a_second_copy():
    model = _tiny_model()
    base = copy.deepcopy(model)
    apply_lora(model, targets=["q_proj", "v_proj"], rank=4, alpha=8)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_b" in n:
                p.normal_(0, 0.5)  # trained adapters: the policy differs from the base
    n_params, ids = sum(p.numel() for p in model.parameters()), {id(p) for p in model.parameters()}
    reference = ReferenceModel.adapters_off(model)
    assert reference.model is model  # the policy itself: no second model
    loss_fn = DPOLoss("sigmoid", beta=0.1, num_chunks=2)
    batch = _batch()
    loss = _loss_on(model, loss_fn, reference)(batch)
    assert (
        sum(p.numel() for p in model.parameters()) == n_params and {id(p) for p in model.parameters()} == ids
    )
    # The reference log-probs equal the base model's, computed separately.
    from ftune.training.step.micro_batch import shift_labels

    labels = shift_labels(batch["labels"])
    with torch.no_grad():
        want = PairLogps.from_rows(*loss_fn.row_logps(base.head, base.hidden(batch["tokens"]), labels))
        got = reference.row_logps(loss_fn, on_device(batch, torch.device("cpu")))
        policy = PairLogps.from_rows(*loss_fn.row_logps(model.head, model.hidden(batch["tokens"]), labels))
    torch.testing.assert_close(got.chosen, want.chosen)
    torch.testing.assert_close(got.rejected, want.rejected)
    assert not torch.allclose(policy.chosen, want.chosen)  # the adapters are back on after the reference pass
    rewards = 0.1 * (policy.chosen - want.chosen)
    assert loss.metrics["rewards/chosen"].value() == pytest.approx(rewards.mean().item(), rel=1e-6)
    assert loss.count == B
    loss.sum.backward()
    trained = [n for n, p in model.named_parameters() if p.grad is not None]
    assert trained and all("lora_" in n for n in trained)
    with adapters_disabled(model):
        pass
    assert all(m.adapter_enabled for m in model.modules() if hasattr(m, "adapter_enabled"))


def test_frozen_reference_is_frozen_and_in_eval_mode():
    reference = ReferenceModel.frozen(_tiny_model())
    assert not any(p.requires_grad for p in reference.model.parameters()) and not reference.model.training


def test_a_per_pair_step_loss_is_the_mean_over_the_steps_pairs():
    """Two micro-batches of 1 and 2 pairs: the step's loss and gradient are those of the 3 pairs' mean."""
    model = _tiny_model()
    apply_lora(model, targets=["q_proj"], rank=4, alpha=8)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.0)
    loss_fn, ref, cpu = DPOLoss("sigmoid", beta=0.1), ReferenceModel.adapters_off(model), torch.device("cpu")
    with torch.no_grad():
        for p in params:
            p.normal_(0, 0.3)
    batch = _batch()
    one = {k: torch.cat([v[:1], v[B : B + 1]]) for k, v in batch.items()}
    two = {k: torch.cat([v[1:B], v[B + 1 :]]) for k, v in batch.items()}

    def run(micro):
        micro = [on_device(mb, cpu) for mb in micro]
        step = StepLoss(micro, opt, step=1, device=cpu, per=per_pair)
        for mb in micro:
            step.scaled(_loss_on(model, loss_fn, ref)(mb)).backward()
        stats = step.finish(None)
        grads = [p.grad.clone() for p in params]
        opt.zero_grad(set_to_none=True)
        return stats, grads

    whole, g_whole = run([batch])
    split, g_split = run([one, two])
    assert split.loss == pytest.approx(whole.loss, rel=1e-6)
    assert split.num_tokens == whole.num_tokens
    for a, b in zip(g_split, g_whole):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    assert set(whole.metrics) == {
        "rewards/chosen",
        "rewards/rejected",
        "rewards/margin",
        "rewards/accuracy",
        "logps/accuracy",
        "logps/reference_accuracy",
    }
    for k in whole.metrics:
        assert split.metrics[k] == pytest.approx(whole.metrics[k], rel=1e-5, abs=1e-7)
    assert math.isfinite(whole.metrics["rewards/margin"])


def test_preference_loss_refuses_a_token_loss():
    from ftune.training import ChunkedCrossEntropyLoss

    model = _tiny_model()
    with pytest.raises(ValueError, match="need loss._component_=ftune.training.DPOLoss"):
        _loss_on(model, ChunkedCrossEntropyLoss(), ReferenceModel.frozen(model))(_batch())
