"""The feature check of PPO (ppo_full_finetune_single_device): the KL penalty, the value clip and GAE's
lambda each change what the recipe trains on. Registered in tests/recipes/features.py's CHECKS; its
mutants (each part dropped or ignored) are tests/recipes/mutants_ppo.py's."""

from __future__ import annotations

import pytest
from run_logs import _column, losses

BETA = 0.2
FAST = ("optimizer.lr=3e-2", "lr_scheduler.num_warmup_steps=0", "ppo_epochs=2", f"kl_coeff={BETA}")


def ppo(run, tmp_path):
    """Two trajectories of two passes each (4 steps), with a large learning rate so that the policy moves
    in one step:

    - KL penalty: the second trajectory is sampled by a policy that moved away from the reference, so its
      rows carry KL (logged ``kl``, summed over a row) and a KL reward ``-beta * kl``; beta 0 trains on
      other rewards, so the step's loss differs;
    - value clip: the second pass over a trajectory reads values that moved towards their returns; clipped
      to within 0.001 of the sampled values they cannot, so the value loss is larger than with a range
      that never binds (1000);
    - GAE lambda: 0 instead of 0.95 gives other advantages, so another policy loss at the first step.
    """
    logs, _ = run(*FAST, "max_steps=4", output_dir=tmp_path / "base")
    kl, kl_reward = _column(logs, "kl"), _column(logs, "kl_reward")
    assert abs(kl[2]) > 1e-4, f"the second trajectory carries no KL ({kl}): the check cannot see the penalty"
    assert kl_reward[2] == pytest.approx(-BETA * kl[2], rel=1e-5), (kl_reward, kl)
    rlhf = _column(logs, "rlhf_reward")
    assert rlhf[2] == pytest.approx(_column(logs, "scores")[2] + kl_reward[2], rel=1e-5, abs=1e-6)
    no_kl, _ = run(*FAST, "max_steps=3", "kl_coeff=0.0", output_dir=tmp_path / "no_kl")
    assert losses(no_kl)[2] != pytest.approx(losses(logs)[2], rel=1e-6), "beta does not change the rewards"

    slow = (*FAST, "optimizer.lr=1e-3", "max_steps=2")  # the values move towards their returns, not past them
    wide, _ = run(*slow, "loss.value_clip_range=1000.0", output_dir=tmp_path / "wide")
    tight, _ = run(*slow, "loss.value_clip_range=0.001", output_dir=tmp_path / "tight")
    assert _column(tight, "value_loss")[0] == pytest.approx(
        _column(wide, "value_loss")[0], rel=1e-6
    )  # step 1
    assert _column(tight, "value_loss")[1] > _column(wide, "value_loss")[1] * (1 + 1e-4), (
        "the value clip never binds: clipped to within 0.001 of the sampled values, the second pass's value "
        "loss is no larger than unclipped"
    )

    lambda0, _ = run(*FAST, "max_steps=1", "lmbda=0.0", output_dir=tmp_path / "lambda0")
    assert _column(lambda0, "policy_loss")[0] != pytest.approx(_column(logs, "policy_loss")[0], rel=1e-4), (
        "GAE's lambda does not change the advantages"
    )
