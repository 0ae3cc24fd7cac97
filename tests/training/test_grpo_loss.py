"""GRPOLoss (grpo, dapo, dr_grpo; KL k3 or k3_ratio): against the formulas written out here in plain
Python, and against TRL 1.16's own GRPOTrainer code run on the same log-probabilities, advantages and
masks (k3_ratio is TRL's ``use_bias_correction_kl=True``, k3 its False); the chunked per-token
log-probabilities against the full log-softmax. Advantages and reward figures: test_grpo_rewards.py.

TRL's code is read from its installed source (``_compute_loss``, ``nanstd``/``nanmin``/``nanmax``)
and executed with a stand-in ``self``, without importing the trainer (which pulls in transformers'
Trainer and accelerate).
"""

import math

import pytest
import torch
from trl_grpo import trl_loss

from ftune.modules.transformer import OutputHead
from ftune.training import (
    GRPOLoss,
    MicroBatch,
    group_advantages,
    per_sequence,
    zero_variance_share,
)
from ftune.training.methods.logps import target_logps

KL_ESTIMATORS = ["k3", "k3_ratio"]
LENGTHS = [5, 2, 4, 1, 3, 5]  # completion tokens per row: unequal, one row using the full width
B, T, G = len(LENGTHS), 5, 3


def _inputs(seed=0, lengths=LENGTHS):
    """Policy log-probs (a leaf), old and reference log-probs, advantages of both signs, a ragged mask."""
    g = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    logps = (-torch.rand(rows, T, generator=g) * 3).requires_grad_()
    old = (
        logps.detach() + (torch.rand(rows, T, generator=g) - 0.5) * 0.8
    )  # ratios in ~[0.67, 1.5]: both clips
    ref = logps.detach() + (torch.rand(rows, T, generator=g) - 0.5)
    adv = torch.randn(rows, generator=g)
    mask = torch.zeros(rows, T, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return logps, old, ref, adv, mask


def _formula(loss_type, beta, eps_low, eps_high, max_len, logps, old, ref, adv, mask, kl_estimator="k3"):
    """The loss (sum / count over the batch), mean KL and clipped fractions, in plain Python floats."""
    logps = logps.detach()
    seq_sums, seq_tokens, kl_sum, low, high = [], [], 0.0, 0, 0
    for i in range(len(adv)):
        a, total, n = float(adv[i]), 0.0, 0
        for t in range(mask.shape[1]):
            if not mask[i, t]:
                continue
            lp, lo, lr = logps[i, t].item(), old[i, t].item(), ref[i, t].item()
            r = math.exp(lp - lo)
            r_clip = min(max(r, 1 - eps_low), 1 + eps_high)
            kl = math.exp(lr - lp) - (lr - lp) - 1
            kl *= r if kl_estimator == "k3_ratio" else 1.0
            total += -min(r * a, r_clip * a) + beta * kl
            n += 1
            kl_sum += kl
            low += r < 1 - eps_low and a < 0
            high += r > 1 + eps_high and a > 0
        seq_sums.append(total)
        seq_tokens.append(n)
    tokens = sum(seq_tokens)
    if loss_type == "grpo":
        loss = sum(s / max(n, 1) for s, n in zip(seq_sums, seq_tokens)) / len(adv)
    elif loss_type == "dapo":
        loss = sum(seq_sums) / tokens
    else:
        loss = sum(seq_sums) / (len(adv) * max_len)
    return loss, kl_sum / tokens, low / tokens, high / tokens


def _count(grpo: GRPOLoss, mask: torch.Tensor) -> int:
    """The step's count of these rows (``GRPOLoss.per``, what StepLoss and validation divide by)."""
    labels = torch.where(mask.bool(), 7, -100)
    return int(grpo.per(MicroBatch(labels.clone(), labels, None, None)))


def _means(out) -> dict[str, float]:
    return {k: m.value() for k, m in out.metrics().items()}


def _loss(loss_type, beta=0.04, eps=0.2, eps_high=0.28, max_len=8, kl_estimator="k3"):
    return GRPOLoss(
        loss_type,
        epsilon=eps,
        epsilon_high=eps_high,
        beta=beta,
        max_completion_length=max_len if loss_type == "dr_grpo" else None,
        num_chunks=3,
        kl_estimator=kl_estimator,
    )


# ---- the loss --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kl_estimator", KL_ESTIMATORS)
@pytest.mark.parametrize("beta", [0.04, 0.0])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_loss_kl_and_clipping_equal_the_formulas(loss_type, beta, kl_estimator):
    logps, old, ref, adv, mask = _inputs()
    grpo = _loss(loss_type, beta=beta, kl_estimator=kl_estimator)
    out = grpo(logps, old, ref if beta else None, adv, mask)
    loss, kl, low, high = _formula(loss_type, beta, 0.2, 0.28, 8, logps, old, ref, adv, mask, kl_estimator)
    expected_count = {"grpo": B, "dapo": sum(LENGTHS), "dr_grpo": B * 8}[loss_type]
    count = _count(grpo, mask)
    assert count == expected_count
    assert (out.sum / count).item() == pytest.approx(loss, rel=1e-5)
    means = _means(out)
    assert means["kl"] == pytest.approx(kl if beta else 0.0, rel=1e-5)
    assert means["clip_ratio/low"] == pytest.approx(low) and low > 0
    assert means["clip_ratio/high"] == pytest.approx(high) and high > 0
    assert means["clip_ratio/region"] == pytest.approx(low + high)


@pytest.mark.parametrize("kl_estimator", KL_ESTIMATORS)
@pytest.mark.parametrize("beta", [0.04, 0.0])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_loss_gradient_and_metrics_equal_trl(loss_type, beta, kl_estimator):
    """k3 is TRL's use_bias_correction_kl=False, k3_ratio its True (its default): loss, gradient, kl."""
    logps, old, ref, adv, mask = _inputs(seed=1)
    grpo = _loss(loss_type, beta=beta, kl_estimator=kl_estimator)
    out = grpo(logps, old, ref if beta else None, adv, mask)
    count = _count(grpo, mask)
    (grad,) = torch.autograd.grad(out.sum / count, logps)
    theirs_logps = logps.detach().clone().requires_grad_()
    loss, metrics = trl_loss(
        loss_type,
        beta=beta,
        eps=0.2,
        eps_high=0.28,
        max_len=8,
        logps=theirs_logps,
        old=old,
        ref=ref,
        adv=adv,
        mask=mask,
        ratio_kl=kl_estimator == "k3_ratio",
    )
    (grad_trl,) = torch.autograd.grad(loss, theirs_logps)
    torch.testing.assert_close(out.sum / count, loss)
    torch.testing.assert_close(grad, grad_trl)
    means = _means(out)
    assert means["clip_ratio/low"] == pytest.approx(metrics["clip_ratio/low_mean"])
    assert means["clip_ratio/high"] == pytest.approx(metrics["clip_ratio/high_mean"])
    assert means["clip_ratio/region"] == pytest.approx(metrics["clip_ratio/region_mean"])
    if beta:
        assert means["kl"] == pytest.approx(metrics["kl"], rel=1e-6)
    else:
        assert "kl" not in metrics and means["kl"] == 0.0


@pytest.mark.parametrize("kl_estimator", KL_ESTIMATORS)
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_accumulated_micro_batches_equal_trl_gradient_accumulation(loss_type, kl_estimator):
    """Two micro-batches of unequal token counts: the step's sum / count (counted by ``per`` before
    backward, as StepLoss does) equals TRL's two accumulated micro-batch losses, value and gradient."""
    logps, old, ref, adv, mask = _inputs(seed=2)
    grpo = _loss(loss_type, kl_estimator=kl_estimator)
    halves = [slice(0, B // 2), slice(B // 2, B)]
    labels = torch.where(mask.bool(), 7, -100)
    batches = [MicroBatch(labels[h].clone(), labels[h], None, None) for h in halves]
    total = sum(int(grpo.per(b)) for b in batches)
    outs = [grpo(logps[h], old[h], ref[h], adv[h], mask[h]) for h in halves]
    assert total == sum(_count(grpo, mask[h]) for h in halves)
    ours = sum(o.sum for o in outs) / total
    (grad,) = torch.autograd.grad(ours, logps)
    theirs_logps = logps.detach().clone().requires_grad_()
    theirs = sum(
        trl_loss(
            loss_type,
            beta=0.04,
            eps=0.2,
            eps_high=0.28,
            max_len=8,
            logps=theirs_logps[h],
            old=old[h],
            ref=ref[h],
            adv=adv[h],
            mask=mask[h],
            accum=2,
            num_items=mask.sum(),
            ratio_kl=kl_estimator == "k3_ratio",
        )[0]
        for h in halves
    )
    (grad_trl,) = torch.autograd.grad(theirs, theirs_logps)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(grad, grad_trl)


def test_one_update_per_rollout_has_ratio_one_and_the_policy_gradient():
    """old = logps.detach(): no clipping, and d loss / d logp = -A / n per token (grpo, no KL)."""
    logps, _, _, adv, mask = _inputs(seed=3)
    out = _loss("grpo", beta=0.0)(logps, logps.detach(), None, adv, mask)
    assert out.clipped_low.item() == 0 and out.clipped_high.item() == 0
    (grad,) = torch.autograd.grad(out.sum, logps)
    expected = -adv[:, None] * mask / mask.sum(-1, keepdim=True)
    torch.testing.assert_close(grad, expected)


def test_k3_ratio_changes_the_gradient_at_ratio_one_to_the_reverse_kl():
    """On-policy (old = logps.detach(), r = 1) both KL terms have the same value, but k3's gradient per
    token is 1 - π_ref/π (the forward KL's in expectation) and k3_ratio's log π - log π_ref (the
    reverse KL's): beta / n times it per token (grpo, advantages 0)."""
    logps, _, ref, _, mask = _inputs(seed=4)
    adv, n = torch.zeros(B), mask.sum(-1, keepdim=True)
    k3, ratio = (
        _loss("grpo", beta=0.5, kl_estimator=k)(logps, logps.detach(), ref, adv, mask) for k in KL_ESTIMATORS
    )
    torch.testing.assert_close(k3.sum, ratio.sum)
    (grad_k3,) = torch.autograd.grad(k3.sum, logps)
    (grad_ratio,) = torch.autograd.grad(ratio.sum, logps)
    delta = ref - logps.detach()
    torch.testing.assert_close(grad_k3, 0.5 * (1 - delta.exp()) * mask / n)
    torch.testing.assert_close(grad_ratio, 0.5 * -delta * mask / n)


def test_beta_zero_needs_no_reference():
    logps, old, ref, adv, mask = _inputs()
    assert not _loss("dapo", beta=0.0).needs_reference
    assert _loss("dapo", beta=0.01).needs_reference
    out = _loss("dapo", beta=0.0)(logps, old, None, adv, mask)
    assert out.kl.item() == 0.0
    with pytest.raises(ValueError, match=r"beta is 0 so no reference is used; pass ref_logps=None"):
        _loss("dapo", beta=0.0)(logps, old, ref, adv, mask)
    with pytest.raises(ValueError, match=r"the KL term needs the reference model's log-probabilities"):
        _loss("dapo", beta=0.01)(logps, old, None, adv, mask)


def test_per_counts_sequences_tokens_or_the_constant():
    labels = torch.tensor([[-100, 3, 4, -100], [-100, -100, 5, -100]])
    batch = MicroBatch(labels.clone(), labels, None, None)
    assert int(per_sequence(batch)) == 2
    assert int(_loss("grpo").per(batch)) == 2
    assert int(_loss("dapo").per(batch)) == 3
    assert int(_loss("dr_grpo", max_len=16).per(batch)) == 32


def test_epsilon_high_none_means_a_symmetric_clip():
    loss = GRPOLoss("grpo", epsilon=0.2, epsilon_high=None, beta=0.0, max_completion_length=None)
    assert (loss.epsilon_low, loss.epsilon_high) == (0.2, 0.2)


# ---- refused arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"loss_type": "bnpo"}, r"loss_type must be one of \['grpo', 'dapo', 'dr_grpo'\], got 'bnpo'"),
        ({"epsilon": 0.0}, r"epsilon must be in \(0, 1\) \(the clip 1 - epsilon\), got 0.0"),
        ({"epsilon": 1.5}, r"epsilon must be in \(0, 1\)"),
        ({"epsilon_high": -0.1}, r"epsilon_high must be > 0 or null \(same as epsilon\), got -0.1"),
        ({"beta": -0.01}, r"beta must be >= 0 \(0: no KL term\), got -0.01"),
        ({"beta": float("nan")}, r"beta must be >= 0"),
        ({"loss_type": "dr_grpo", "max_completion_length": None}, r"set it to the rollout's max new tokens"),
        (
            {"loss_type": "dapo", "max_completion_length": 64},
            r"leave it null otherwise; got loss_type 'dapo'",
        ),
        ({"loss_type": "dr_grpo", "max_completion_length": 0}, r"max_completion_length 0"),
        ({"num_chunks": 0}, r"num_chunks must be a positive int, got 0"),
        (
            {"kl_estimator": "k1"},
            r"kl_estimator must be one of \['k3', 'k3_ratio'\], got 'k1'; set loss.kl_estimator=k3",
        ),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    args = {
        "loss_type": "grpo",
        "epsilon": 0.2,
        "epsilon_high": None,
        "beta": 0.0,
        "max_completion_length": None,
        "num_chunks": 2,
    }
    args.update(kwargs)
    loss_type = args.pop("loss_type")
    with pytest.raises(ValueError, match=match):
        GRPOLoss(loss_type, **args)


def test_bad_inputs_are_refused():
    logps, old, ref, adv, mask = _inputs()
    loss = _loss("dapo", beta=0.0)
    with pytest.raises(ValueError, match=r"advantages \[b\]; got logps \[6, 5\], advantages \[5\]"):
        loss(logps, old, None, adv[:5], mask)
    with pytest.raises(ValueError, match=r"mismatched \{'mask': \[6, 4\]\}"):
        loss(logps, old, None, adv, mask[:, :4])
    with pytest.raises(ValueError, match=r"a completion has 5 tokens, more than max_completion_length=4"):
        _loss("dr_grpo", beta=0.0, max_len=4)(logps, old, None, adv, mask)
    with pytest.raises(ValueError, match=r"group_size must be an int >= 2 .*got 1"):
        group_advantages(torch.zeros(4), 1, scale_rewards=True)
    with pytest.raises(ValueError, match=r"rewards must be 1-D \[prompts \* group_size\] with group_size=3"):
        group_advantages(torch.zeros(4), 3, scale_rewards=True)
    with pytest.raises(ValueError, match=r"rewards must be finite numbers; got nan at completion 1"):
        zero_variance_share(torch.tensor([0.0, float("nan"), 1.0]), 3)
    with pytest.raises(ValueError, match=r"scale_rewards must be True or False, got 'group'"):
        group_advantages(torch.zeros(3), 3, scale_rewards="group")
    with pytest.raises(ValueError, match=r"token_logps: num_chunks must be a positive int, got 0"):
        target_logps(
            OutputHead(torch.zeros(4, 2), None),
            torch.zeros(1, 3, 2),
            torch.zeros(1, 3, dtype=torch.long),
            num_chunks=0,
        )
