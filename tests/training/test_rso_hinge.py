"""DPOLoss("hinge"), RSO's loss (torchtune's RSOLoss): against max(0, 1 - β·h) written out here, against
TRL's DPOTrainer code with loss_type "hinge", and its argument rules."""

import pytest
import torch
from trl_losses import trl_dpo

from ftune.training import DPOLoss, PairLogps

B, S = 4, 10


def _inputs(seed: int):
    """Per-token policy log-probs [2B, S-1] (a leaf), TRL's completion mask [2B, S], reference sums [B] x 2."""
    g = torch.Generator().manual_seed(seed)
    raw = (-torch.rand(2 * B, S - 1, generator=g) * 3).requires_grad_()
    mask = torch.zeros(2 * B, S, dtype=torch.long)
    for row, start in enumerate([2, 4, 3, 5, 1, 6, 2, 7]):  # answers of different lengths
        mask[row, start:] = 1
    ref = -torch.rand(2 * B, generator=g) * 10
    return raw, mask, ref[:B], ref[B:]


def _pairs(raw, mask, ref_c, ref_r):
    policy = PairLogps.from_rows((raw * mask[:, 1:]).sum(1), mask[:, 1:].sum(1))
    return policy, PairLogps(ref_c, ref_r, policy.chosen_tokens, policy.rejected_tokens)


def test_hinge_losses_rewards_and_gradients_equal_the_formula():
    raw, mask, ref_c, ref_r = _inputs(seed=0)
    beta = 0.5
    policy, reference = _pairs(raw, mask, ref_c, ref_r)
    out = DPOLoss("hinge", beta=beta)(policy, reference)
    (grad,) = torch.autograd.grad(out.losses.sum(), raw)

    # Written out per pair, with Python floats: h = (π(c) - π_ref(c)) - (π(r) - π_ref(r)); max(0, 1 - β h).
    pc, pr = policy.chosen.tolist(), policy.rejected.tolist()
    rc, rr = ref_c.tolist(), ref_r.tolist()
    margins = [beta * ((pc[i] - rc[i]) - (pr[i] - rr[i])) for i in range(B)]
    want = [max(0.0, 1.0 - m) for m in margins]
    torch.testing.assert_close(out.losses, torch.tensor(want))
    torch.testing.assert_close(out.chosen_rewards, beta * (policy.chosen - ref_c).detach())
    torch.testing.assert_close(out.rejected_rewards, beta * (policy.rejected - ref_r).detach())
    # The inputs hold both sides of the hinge: a pair past the margin, and pairs inside it.
    assert any(m > 1 for m in margins) and any(m < 1 for m in margins), margins
    # d loss / d log π(c) = -β inside the margin, 0 past it (and the opposite sign for the rejected answer).
    for i, m in enumerate(margins):
        slope = -beta if m < 1 else 0.0
        chosen_rows = grad[i][mask[i, 1:] == 1]
        rejected_rows = grad[B + i][mask[B + i, 1:] == 1]
        assert torch.all(chosen_rows == slope) and torch.all(rejected_rows == -slope), (i, m)
    assert (grad[mask[:, 1:] == 0] == 0).all()


def test_hinge_is_not_dpos_sigmoid():
    """The mutant check: a hinge branch that fell through to DPO's sigmoid would fail here."""
    raw, mask, ref_c, ref_r = _inputs(seed=0)
    policy, reference = _pairs(raw.detach(), mask, ref_c, ref_r)
    hinge = DPOLoss("hinge", beta=0.5)(policy, reference).losses
    sigmoid = DPOLoss("sigmoid", beta=0.5)(policy, reference).losses
    assert (hinge == 0).any() and (sigmoid > 0).all()  # the hinge is flat past the margin, the sigmoid never
    assert not torch.allclose(hinge, sigmoid, atol=1e-3)


@pytest.mark.parametrize("beta, seed", [(0.1, 1), (0.5, 0), (2.0, 3)])
def test_hinge_equals_trl(beta, seed):
    raw, mask, ref_c, ref_r = _inputs(seed=seed)
    policy, reference = _pairs(raw, mask, ref_c, ref_r)
    out = DPOLoss("hinge", beta=beta)(policy, reference)
    (grad,) = torch.autograd.grad(out.losses.mean(), raw)
    raw_trl = raw.detach().clone().requires_grad_()
    loss, metrics = trl_dpo("hinge", beta, raw_trl * mask[:, 1:], mask, ref_c, ref_r)
    (grad_trl,) = torch.autograd.grad(loss, raw_trl)
    torch.testing.assert_close(out.losses.mean(), loss)
    torch.testing.assert_close(grad, grad_trl)
    ours = {k: m.value() for k, m in out.metrics().items()}
    assert ours["rewards/chosen"] == pytest.approx(metrics["rewards/chosen"], rel=1e-6)
    assert ours["rewards/rejected"] == pytest.approx(metrics["rewards/rejected"], rel=1e-6)
    assert ours["rewards/margin"] == pytest.approx(metrics["rewards/margins"], rel=1e-6)
    assert ours["rewards/accuracy"] == pytest.approx(metrics["rewards/accuracies"])


def test_hinge_needs_a_reference_and_refuses_smoothing_and_gamma():
    assert DPOLoss("hinge", beta=0.1).needs_reference
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 0.5\), and 0 for 'hinge'"):
        DPOLoss("hinge", beta=0.1, label_smoothing=0.1)
    with pytest.raises(ValueError, match="gamma is SimPO's target margin"):
        DPOLoss("hinge", beta=0.1, gamma=0.5)
    raw, mask, ref_c, ref_r = _inputs(seed=0)
    policy, _ = _pairs(raw.detach(), mask, ref_c, ref_r)
    with pytest.raises(ValueError, match="needs the reference model's log-probabilities"):
        DPOLoss("hinge", beta=0.1)(policy, None)
