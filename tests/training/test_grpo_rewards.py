"""GRPO's rewards: group advantages and the logged reward figures against TRL 1.16's own code.

TRL's advantage block and reward-logging lines of ``GRPOTrainer._generate_and_score_completions`` are
read from its installed source and run with a stand-in ``self`` (tests/training/trl_grpo.py).
"""

import statistics

import pytest
import torch
from trl_grpo import trl_advantages, trl_reward_metrics

from ftune.training import group_advantages, zero_variance_share
from ftune.training.methods.grpo_rewards import reward_metrics
from ftune.training.step.metric import add_metrics, reduce_metrics

G = 3
NAMES = ["correct", "format"]
FIGURES = ["reward", "reward_std", "frac_reward_zero_std"] + [
    f"rewards/{n}/{s}" for n in NAMES for s in ("mean", "std")
]


@pytest.mark.parametrize("scale", [True, False])
def test_group_advantages_equal_the_formula_and_trl(scale):
    rewards = torch.tensor([1.0, 0.0, 0.5, 2.0, 2.0, 2.0, -1.0, 3.0, 0.0, 0.25, 0.25, 0.0])
    ours = group_advantages(rewards, G, scale_rewards=scale)
    expected = []
    for k in range(0, len(rewards), G):
        group = rewards[k : k + G].tolist()
        mean, std = statistics.mean(group), statistics.stdev(group)  # unbiased, as TRL
        expected += [(r - mean) / (std + 1e-4) if scale else r - mean for r in group]
    torch.testing.assert_close(ours, torch.tensor(expected))
    theirs, _ = trl_advantages(rewards, G, "group" if scale else "none")
    torch.testing.assert_close(ours, theirs)


def test_zero_variance_share_counts_groups_without_signal_as_trl():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0])
    assert zero_variance_share(rewards, G).item() == pytest.approx(0.75)
    _, is_std_zero = trl_advantages(rewards, G, "none")
    assert zero_variance_share(rewards, G).item() == pytest.approx(is_std_zero.float().mean().item())
    # equal rewards give zero advantages whether or not they are scaled
    assert group_advantages(rewards, G, scale_rewards=True)[:3].abs().max() == 0


def _rollouts(count=3, prompts=2, seed=0):
    """Rewards of `count` rollouts (micro-batches or ranks): [completions, functions] each, one group all 1."""
    g = torch.Generator().manual_seed(seed)
    out = [torch.randint(0, 3, (prompts * G, len(NAMES)), generator=g).float() / 2 for _ in range(count)]
    out[0][:G] = 1.0
    return out


def _figures(rollouts) -> dict[str, float]:
    """The rollouts' reward metrics, added and read, as StepLoss and validate do (one rank)."""
    added = {}
    for r in rollouts:
        add_metrics(added, reward_metrics(r.sum(1), dict(zip(NAMES, r.T)), G))
    return reduce_metrics(added, torch.device("cpu"))


def test_a_steps_reward_figures_are_trls_over_its_completions():
    """reward_std and rewards/<name>/std: the sample std of the step's rewards (TRL's nanstd over its
    generation batch: the step's, with steps_per_generation == gradient_accumulation_steps), whatever
    the loss's count (each figure carries its own)."""
    rollouts = _rollouts()
    theirs = trl_reward_metrics(torch.cat(rollouts), NAMES, G)
    ours = _figures(rollouts)
    assert sorted(ours) == sorted(FIGURES)
    for key in FIGURES:
        assert ours[key] == pytest.approx(theirs[key], rel=1e-5), key
    assert theirs["reward_std"] > 0 and theirs["frac_reward_zero_std"] > 0
    population = statistics.pstdev(torch.cat(rollouts).sum(1).tolist())
    assert ours["reward_std"] != pytest.approx(population, rel=1e-3)  # sample, not population


def test_one_rollouts_figures_are_trls_of_that_rollout():
    rollouts = _rollouts(count=1, seed=1)
    theirs = trl_reward_metrics(rollouts[0], NAMES, G)
    ours = _figures(rollouts)
    for key in FIGURES:
        assert ours[key] == pytest.approx(theirs[key], rel=1e-5), key
