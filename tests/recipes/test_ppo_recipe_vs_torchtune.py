"""ppo_full_finetune_single_device's per-step figures equal torchtune 0.6.1's own PPO recipe on fixed generations.

Both recipes train the same tiny policy and value model (the reward model's weights) with the same
frozen reward model and reference, on the same 8 prompts (2 trajectories of 4, ppo_epochs 2: 4
optimizer steps) whose responses are fixed: torchtune's ``generation.generate`` and ftune's
``training.sample_rollout`` are made to return them (they stop early, late, on the last token, at
once, or never, with min_response_length and penalise_no_eos on). torchtune's figures are recorded by
tests/recipes/ppo_torchtune_golden.py into tests/assets/ppo_torchtune_steps.json (rerun with the
commands in its docstring). Measured (fp32, CPU, one thread): the 4 losses within 6.7e-7 relative,
policy_loss 1.3e-6, value_loss 5.4e-7, ratios 3.1e-7, clipfrac equal; approx_policy_kl (about 1e-4)
within 1e-6 absolute. The tolerance is 1e-5 relative, 1e-6 absolute (for figures near 0).
"""

import hashlib
import json
from pathlib import Path

import pytest
import torch
from conftest import load_recipe  # tests/recipes/conftest.py
from features import read_log
from ppo_parity_inputs import SETTINGS, write_inputs
from tiny_checkpoint import tiny_overrides

from ftune import training
from ftune.config import load_config
from ftune.generation.rollout import Rollout

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "assets" / "ppo_torchtune_steps.json").read_text())
FIGURES = {
    "loss": "loss",
    "policy_loss": "policy_loss",
    "value_loss": "value_loss",
    "ratios": "ratios",
    "clipfrac": "clipfrac",
    "approx_policy_kl": "approx_policy_kls",
}  # fmt: skip  ftune's name: torchtune's


def fixed_rollouts(rows):
    """training.sample_rollout returning the fixed responses of the batch's prompts (by dataset index), cut
    after their first stop token as ftune's rollouts are."""

    def sample(model, prompts, sampling, *, epoch):
        responses = torch.tensor([rows["responses"][i] for i in prompts.indices])  # (b, t)
        stop = torch.isin(responses, torch.tensor(rows["stops"]))
        after = (stop.cumsum(1) - stop.long()) > 0  # past the first stop token
        lengths = (~after).sum(1)
        return Rollout(
            prompt_ids=[rows["prompts"][i] for i in prompts.indices],
            completion_ids=responses.masked_fill(after, rows["pad"]),
            completion_mask=(~after).long(),
            logps=torch.zeros(responses.shape),
            lengths=lengths,
            finished=stop.any(1),
            group_size=1,
            pad_id=rows["pad"],
            logp_temperature=sampling.temperature,
        )

    return sample


def test_per_step_losses_equal_torchtune_0_6_1s_ppo_recipe(tmp_path, demo_dir, monkeypatch):
    folder = write_inputs(tmp_path / "inputs")
    digest = hashlib.sha256(
        (folder / "policy.safetensors").read_bytes() + (folder / "reward.safetensors").read_bytes()
    )
    assert digest.hexdigest() == GOLDEN["inputs_sha256"], (
        "the tiny weights changed: rerun ppo_torchtune_golden.py"
    )
    rows = json.loads((folder / "rows.json").read_text())
    assert hashlib.sha256((folder / "rows.json").read_bytes()).hexdigest() == GOLDEN["rows_sha256"]
    monkeypatch.setattr(training, "sample_rollout", fixed_rollouts(rows))
    s, out, rm = SETTINGS, tmp_path / "ftune", folder / "rm" / "step_0"
    overrides = [
        *tiny_overrides(folder / "ckpt", demo_dir, out), "lr_scheduler.num_warmup_steps=0", "shuffle=false",
        f"reward_checkpointer.checkpoint_dir={rm}", f"value_checkpointer.checkpoint_dir={rm}", "max_steps=4",
        f"batch_size={s['batch_size']}", f"ppo_batch_size={s['batch_size']}", f"ppo_epochs={s['ppo_epochs']}",
        f"max_generated_tokens={s['max_generated_tokens']}", f"temperature={s['temperature']}",
        f"kl_coeff={s['kl_coeff']}", f"gamma={s['gamma']}", f"lmbda={s['lmbda']}", "stop_token_ids=[2]",
        f"min_response_length={s['min_response_length']}", f"penalise_no_eos={s['penalise_no_eos']}",
        f"reward_penalty={s['reward_penalty']}", f"optimizer.lr={s['lr']}", "optimizer.weight_decay=0.0",
        *[f"loss.{k}={s[k]}" for k in ("epsilon", "value_clip_range", "value_coeff")],
    ]  # fmt: skip
    load_recipe("ppo_full_finetune_single_device").main(load_config("smollm2/135M_ppo", overrides))
    ours = [r for r in read_log(out) if "loss" in r]
    assert len(ours) == len(GOLDEN["steps"]) == 4
    for mine, theirs in zip(ours, GOLDEN["steps"]):
        for name, their_name in FIGURES.items():
            assert mine[name] == pytest.approx(theirs[their_name], rel=1e-5, abs=1e-6), (name, mine, theirs)
    assert len({round(r["loss"], 4) for r in ours}) == 4  # the steps differ: the weights move
    # torchtune logs a trajectory's figures once; ftune with each of its steps (here all of its rows).
    for mine, theirs in zip(ours[:: s["ppo_epochs"]], GOLDEN["trajectories"]):
        for name in ("scores", "kl", "kl_reward", "rlhf_reward", "response_lengths"):
            assert mine[name] == pytest.approx(theirs[name], rel=1e-5, abs=1e-6), (name, mine, theirs)
