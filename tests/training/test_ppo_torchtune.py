"""PPO's maths against torchtune 0.6.1's ``torchtune.rlhf`` on fixed tensors.

The reference values are torchtune's own outputs on seeded inputs, recorded into
tests/assets/ppo_torchtune.json by tests/training/ppo_torchtune_golden.py (rerun it with a torchtune
0.6.1 environment: ``/tmp/ttenv/bin/python tests/training/ppo_torchtune_golden.py``). Measured
difference on this machine (torch 2.13.0 on both sides, fp32): 0, for every mask, index, penalty,
reward, GAE advantage and return, whitened value, loss figure and gradient; the tolerance below is 1e-6. torchtune 0.6.1 has no adaptive KL controller: ``AdaptiveKLController`` is checked
against Ziegler et al.'s formula by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ftune.training.methods import ppo_responses as resp
from ftune.training.methods.ppo_advantages import gae, whiten
from ftune.training.methods.ppo_loss import PPOLoss
from ftune.training.methods.ppo_rewards import AdaptiveKLController, ppo_rewards

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "assets" / "ppo_torchtune.json").read_text())
TOL = {"rtol": 1e-6, "atol": 1e-6}


def t(key, dtype=torch.float32):
    return torch.tensor(GOLDEN[key], dtype=dtype)


def close(ours: torch.Tensor, theirs) -> None:
    torch.testing.assert_close(ours, torch.tensor(theirs, dtype=ours.dtype), **TOL)


def test_responses_end_at_their_first_stop_token_as_torchtune_cuts_them():
    responses = t("responses", torch.long)
    before = responses.clone()
    padding, truncated = resp.truncate_at_first_stop(responses, GOLDEN["stops"], GOLDEN["pad"])
    assert torch.equal(responses, before)  # torchtune writes into its input; ftune does not
    assert padding.tolist() == GOLDEN["padding"]
    assert truncated.tolist() == GOLDEN["truncated"]
    last = resp.last_index(padding)
    assert last.tolist() == GOLDEN["last"]
    score_at = resp.score_index(last, padding.shape[1])
    assert score_at.tolist() == GOLDEN["score_at"]
    assert resp.value_padding(padding, score_at).tolist() == GOLDEN["value_padding"]


@pytest.mark.parametrize("eos", [True, False])
@pytest.mark.parametrize("min_len", [None, 3])
def test_penalised_responses_are_torchtunes(eos, min_len):
    padding = t("padding", torch.bool)
    got = resp.penalised(padding, resp.last_index(padding), penalise_no_eos=eos, min_response_length=min_len)
    assert got.tolist() == GOLDEN["penalties"][f"{eos}_{min_len}"]


def test_rewards_add_the_score_at_its_index_to_the_kl_penalty():
    out = ppo_rewards(t("scores"), t("logps"), t("ref_logps"), GOLDEN["kl_coeff"], t("score_at", torch.long))
    close(out.total, GOLDEN["rewards"])
    close(out.kl, GOLDEN["kl"])
    close(out.kl_reward, GOLDEN["kl_reward"])
    last = ppo_rewards(t("scores"), t("logps"), t("ref_logps"), GOLDEN["kl_coeff"])
    close(last.total, GOLDEN["rewards_last"])


def test_gae_and_whitening_are_torchtunes():
    mask = ~t("padding", torch.bool)
    g = GOLDEN["gae"]
    advantages, returns = gae(t("values"), t("rewards"), gamma=g["gamma"], lmbda=g["lmbda"], mask=mask)
    close(advantages, g["advantages"])
    close(returns, g["returns"])
    g = GOLDEN["gae_nomask"]
    advantages, returns = gae(t("values"), t("rewards"), gamma=g["gamma"], lmbda=g["lmbda"])
    close(advantages, g["advantages"])
    close(returns, g["returns"])
    x = t("x")
    close(whiten(x, mask), GOLDEN["whiten"]["masked"])
    close(whiten(x, mask, shift_mean=False), GOLDEN["whiten"]["masked_no_shift"])
    close(whiten(x), GOLDEN["whiten"]["plain"])


def test_gae_lambda_and_gamma_change_the_advantages():
    """A mutant that ignores λ (or γ) must fail: the golden uses λ = 0.95, not 1 or 0."""
    mask = ~t("padding", torch.bool)
    base, _ = gae(t("values"), t("rewards"), gamma=0.9, lmbda=0.95, mask=mask)
    for gamma, lmbda in ((0.9, 1.0), (0.9, 0.0), (1.0, 0.95)):
        other, _ = gae(t("values"), t("rewards"), gamma=gamma, lmbda=lmbda, mask=mask)
        assert not torch.allclose(base, other)


def test_ppo_loss_its_figures_and_gradients_are_torchtunes():
    g = GOLDEN["loss"]
    loss_fn = PPOLoss(
        epsilon=g["epsilon"], value_clip_range=g["value_clip_range"], value_coeff=g["value_coeff"]
    )
    padding, value_padding = t("padding", torch.bool), t("value_padding", torch.bool)
    logps = t("new_logps").requires_grad_()
    values = t("new_values").requires_grad_()
    advantages, returns = torch.tensor(GOLDEN["gae"]["advantages"]), torch.tensor(GOLDEN["gae"]["returns"])
    out = loss_fn(t("logps"), logps, advantages, t("values"), values, returns, ~padding, ~value_padding)
    out.loss.backward()
    ours = [out.loss, out.policy_loss, out.value_loss, out.ratios, out.clipfrac]
    close(torch.stack([v.detach() for v in ours]), g["masked"])
    close(out.approx_policy_kl, g["approx_kl"])
    close(logps.grad, g["grad_logps"])
    close(values.grad, g["grad_values"])
    plain = loss_fn(t("logps"), logps.detach(), advantages, t("values"), values.detach(), returns)
    ours = [plain.loss, plain.policy_loss, plain.value_loss, plain.ratios, plain.clipfrac]
    close(torch.stack(ours), g["plain"])
    assert 0 < float(out.clipfrac) < 1  # the inputs exercise both sides of the clip


def test_value_clip_changes_the_value_loss():
    """A mutant that drops the value clip must fail: the golden's values move past the clip range."""
    g = GOLDEN["loss"]
    args = (t("logps"), t("new_logps"), torch.tensor(GOLDEN["gae"]["advantages"]), t("values"), t("new_values"),
            torch.tensor(GOLDEN["gae"]["returns"]))  # fmt: skip
    clipped = PPOLoss(epsilon=0.2, value_clip_range=g["value_clip_range"], value_coeff=0.1)(*args)
    unclipped = PPOLoss(epsilon=0.2, value_clip_range=1e6, value_coeff=0.1)(*args)
    assert float(clipped.value_loss) > float(unclipped.value_loss)


def test_adaptive_kl_controller_follows_ziegler_et_al():
    kl = AdaptiveKLController(0.2, target=6.0, horizon=10_000)
    assert kl.update(9.0, 64) == pytest.approx(0.2 * (1 + 0.2 * 64 / 10_000))  # clipped at +0.2
    before = kl.value
    assert kl.update(5.4, 32) == pytest.approx(before * (1 - 0.1 * 32 / 10_000))
    before = kl.value
    assert kl.update(0.0, 10) == pytest.approx(before * (1 - 0.2 * 10 / 10_000))  # clipped at -0.2
    restored = AdaptiveKLController(1.0, target=1.0, horizon=1)
    restored.load_state_dict(kl.state_dict())
    assert restored.value == kl.value


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda: AdaptiveKLController(0.0, target=6.0, horizon=10),
            "init_kl_coeff must be a number > 0, got 0.0",
        ),
        (lambda: PPOLoss(epsilon=0), r"loss.epsilon: PPOLoss needs a number > 0, got 0"),
        (lambda: PPOLoss(value_coeff=-1), r"loss.value_coeff: PPOLoss needs a number >= 0, got -1"),
        (
            lambda: gae(torch.zeros(2, 3), torch.zeros(2, 3), gamma=1.5, lmbda=0.9),
            r"gamma must be in \[0, 1\], got 1.5",
        ),
        (lambda: gae(torch.zeros(2, 3), torch.zeros(2, 4), gamma=1, lmbda=0.9), r"rewards \[2, 4\]"),
        (
            lambda: ppo_rewards(torch.zeros(2), torch.zeros(2, 3), torch.zeros(2, 3), -0.1),
            "kl_coeff must be >= 0",
        ),
        (lambda: PPOLoss()(*[torch.zeros(2, 3)] * 5, torch.zeros(2, 4)), r"'returns': \[2, 4\]"),
    ],
)
def test_bad_arguments_are_refused_with_what_was_given(make, match):
    with pytest.raises(ValueError, match=match):
        make()
