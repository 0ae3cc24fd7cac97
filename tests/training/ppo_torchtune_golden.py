"""Record torchtune 0.6.1's PPO maths on seeded inputs into tests/assets/ppo_torchtune.json.

    /tmp/ttenv/bin/python tests/training/ppo_torchtune_golden.py

Runs in a torchtune 0.6.1 environment (torch 2.13.0 CPU, torchtune 0.6.1, torchao 0.15.0: made as
benchmarks/vs_torchtune.py makes its own), never in ftune's: CI cannot import torchtune, so
tests/training/test_ppo_torchtune.py reads the file this writes. Inputs and outputs are both stored
(lists of floats and ints), so the test does not depend on torch's random streams. What torchtune
computes inline in its recipe (the score and value positions, the approximate KL) is taken from its
recipes/ppo_full_finetune_single_device.py, line for line.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torchtune import rlhf
from torchtune.rlhf.loss import PPOLoss
from torchtune.training import get_unmasked_sequence_lengths

OUT = Path(__file__).resolve().parents[1] / "assets" / "ppo_torchtune.json"
B, T, STOPS, PAD = 6, 8, [2, 5], 0


def main() -> None:
    g = torch.Generator().manual_seed(0)
    responses = torch.randint(1, 20, (B, T), generator=g)
    responses[1] = torch.tensor([7, 3, 4, 6, 8, 1, 5, 4])  # stops one before the last position
    responses[2] = torch.tensor([7, 3, 4, 6, 8, 2, 3, 4])  # stops in the middle
    responses[3] = torch.tensor([7, 3, 4, 6, 8, 1, 3, 4])  # never stops
    responses[4] = torch.tensor([2, 3, 4, 6, 8, 1, 3, 4])  # stops at once
    responses[5] = torch.tensor([7, 3, 4, 6, 8, 1, 3, 5])  # stops on the last position
    padding, truncated = rlhf.truncate_sequence_at_first_stop_token(
        responses.clone(), torch.tensor(STOPS), PAD
    )
    last = get_unmasked_sequence_lengths(padding)
    # recipes/ppo_full_finetune_single_device.py, generate_trajectory, step 6.1
    score_at = torch.where((last > 0) & (last < T - 1), last + 1, last)
    value_padding = padding.clone().scatter_(1, score_at.unsqueeze(-1), False)
    penalties = {
        f"{eos}_{min_len}": rlhf.get_reward_penalty_mask(padding, last, eos, min_len).tolist()
        for eos in (True, False)
        for min_len in (None, 3)
    }

    scores = torch.randn(B, generator=g)
    logps = -torch.rand(B, T, generator=g) * 3
    ref_logps = -torch.rand(B, T, generator=g) * 3
    logps[padding], ref_logps[padding] = 1.0, 1.0  # the recipe's step 6
    values = torch.randn(B, T, generator=g)
    values[value_padding] = 0.0
    rewards, kl, kl_reward = rlhf.get_rewards_ppo(scores, logps, ref_logps, 0.05, score_at)
    rewards_last, _, _ = rlhf.get_rewards_ppo(scores, logps, ref_logps, 0.05)
    advantages, returns = rlhf.estimate_advantages(values, rewards, 0.9, 0.95, masks=~padding)
    advantages_nomask, returns_nomask = rlhf.estimate_advantages(values, rewards, 1.0, 0.5)
    x = torch.randn(B, T, generator=g)

    # The loss: new log-probabilities and values near the old ones, so some ratios clip and some do not.
    new_logps = (logps + 0.3 * torch.randn(B, T, generator=g)).requires_grad_()
    new_values = (values + 0.4 * torch.randn(B, T, generator=g)).requires_grad_()
    loss_fn = PPOLoss(epsilon=0.2, value_clip_range=0.2, value_coeff=0.1)
    out = loss_fn(logps, new_logps, advantages, values, new_values, returns, ~padding, ~value_padding)
    out[0].backward()
    approx_kl = (0.5 * (new_logps - logps).pow(2)).mean()  # the recipe's ppo_step
    plain = loss_fn(logps, new_logps.detach(), advantages, values, new_values.detach(), returns)

    golden = {
        "torch": torch.__version__,
        "torchtune": "0.6.1",
        "stops": STOPS,
        "pad": PAD,
        "responses": responses.tolist(),
        "padding": padding.tolist(),
        "truncated": truncated.tolist(),
        "last": last.tolist(),
        "score_at": score_at.tolist(),
        "value_padding": value_padding.tolist(),
        "penalties": penalties,
        "scores": scores.tolist(),
        "logps": logps.tolist(),
        "ref_logps": ref_logps.tolist(),
        "values": values.tolist(),
        "kl_coeff": 0.05,
        "rewards": rewards.tolist(),
        "kl": kl.tolist(),
        "kl_reward": kl_reward.tolist(),
        "rewards_last": rewards_last.tolist(),
        "gae": {"gamma": 0.9, "lmbda": 0.95, "advantages": advantages.tolist(), "returns": returns.tolist()},
        "gae_nomask": {
            "gamma": 1.0,
            "lmbda": 0.5,
            "advantages": advantages_nomask.tolist(),
            "returns": returns_nomask.tolist(),
        },
        "x": x.tolist(),
        "whiten": {
            "masked": rlhf.whiten(x, ~padding).tolist(),
            "masked_no_shift": rlhf.whiten(x, ~padding, shift_mean=False).tolist(),
            "plain": rlhf.whiten(x).tolist(),
        },
        "new_logps": new_logps.detach().tolist(),
        "new_values": new_values.detach().tolist(),
        "loss": {
            "epsilon": 0.2,
            "value_clip_range": 0.2,
            "value_coeff": 0.1,
            "masked": [float(v.detach()) for v in out],
            "plain": [float(v) for v in plain],
            "approx_kl": float(approx_kl.detach()),
            "grad_logps": new_logps.grad.tolist(),
            "grad_values": new_values.grad.tolist(),
        },
    }
    OUT.write_text(json.dumps(golden, indent=None) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
