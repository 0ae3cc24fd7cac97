"""ppo_full_finetune_single_device on the tiny model: the shipped config's 2 steps, what each model does,
resume, and the refusals.

The reward and value models start from a tiny full reward model (1 step of reward_model_single_device
with smollm2/135M_demo_full_rm). Per-step parity with torchtune 0.6.1's own recipe is
tests/recipes/test_ppo_recipe_vs_torchtune.py; the maths against torchtune.rlhf, tests/training/test_ppo_torchtune.py.
"""

import math

import pytest
import torch
from conftest import load_recipe  # tests/recipes/conftest.py
from features import losses, read_log
from safetensors.torch import load_file
from tiny_checkpoint import tiny_overrides

from ftune.config import ConfigError, load_config

CONFIG = "smollm2/135M_ppo"
TORCHTUNE_NAMES = {"policy_loss", "value_loss", "ratios", "clipfrac", "approx_policy_kl", "scores", "kl"}
TORCHTUNE_NAMES |= {"kl_reward", "rlhf_reward", "response_lengths"}


@pytest.fixture(scope="module")
def reward_model_dir(tiny_checkpoint, demo_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("rm")
    cfg = load_config(
        "smollm2/135M_demo_full_rm", [*tiny_overrides(tiny_checkpoint, demo_dir, out), "max_steps=1"]
    )
    load_recipe("reward_model_single_device").main(cfg)
    return out / "step_1"


def ppo_overrides(tiny_checkpoint, demo_dir, out, reward_model_dir, *more):
    models = [f"{k}.checkpoint_dir={reward_model_dir}" for k in ("reward_checkpointer", "value_checkpointer")]
    tiny = [*tiny_overrides(tiny_checkpoint, demo_dir, out), "lr_scheduler.num_warmup_steps=0"]  # constant lr
    return [*tiny, *models, "max_generated_tokens=6", *more]


def _weights(folder):
    return load_file(str(next(folder.glob("*.safetensors"))))


def test_the_shipped_config_trains_2_steps_policy_and_value_model(
    tiny_checkpoint, demo_dir, reward_model_dir, tmp_path
):
    out = tmp_path / "ppo"
    more = ("max_steps=2", "optimizer.lr=1e-3")  # 1 trajectory of 4 prompts, ppo_epochs=2 passes of 4 rows
    cfg = load_config(CONFIG, ppo_overrides(tiny_checkpoint, demo_dir, out, reward_model_dir, *more))
    load_recipe("ppo_full_finetune_single_device").main(cfg)
    steps = [r for r in read_log(out) if "loss" in r]
    assert len(steps) == 2 and all(math.isfinite(x) for x in losses(read_log(out)))
    assert TORCHTUNE_NAMES <= steps[0].keys(), sorted(steps[0])
    assert steps[0]["ratios"] == pytest.approx(1.0)  # the first step trains on the policy that sampled
    assert steps[1]["ratios"] != pytest.approx(1.0)  # the second pass, after an update
    assert steps[0]["scores"] == steps[1]["scores"]  # one trajectory serves both passes
    rm = _weights(reward_model_dir)
    value = _weights(out / "value" / "step_2")  # the value model trained and was saved beside the policy
    assert value.keys() == rm.keys()
    assert not torch.equal(value["score.weight"], rm["score.weight"])
    policy, base = _weights(out / "step_2"), _weights(tiny_checkpoint)
    assert policy.keys() == base.keys()
    assert any(not torch.equal(policy[k], base[k]) for k in base)


def test_resume_gives_the_losses_of_an_uninterrupted_run(
    tiny_checkpoint, demo_dir, reward_model_dir, tmp_path
):
    """4 steps straight equal 3 steps, then a resume for the 4th, mid-trajectory (2 steps a trajectory)."""
    more = ("ppo_batch_size=2", "ppo_epochs=1", "kl_target=1.0", "kl_coeff=0.05")  # adaptive beta: saved too
    straight = tmp_path / "straight"
    cfg = load_config(
        CONFIG, ppo_overrides(tiny_checkpoint, demo_dir, straight, reward_model_dir, *more, "max_steps=4")
    )
    load_recipe("ppo_full_finetune_single_device").main(cfg)
    broken = tmp_path / "broken"
    first = ppo_overrides(tiny_checkpoint, demo_dir, broken, reward_model_dir, *more, "max_steps=3")
    load_recipe("ppo_full_finetune_single_device").main(load_config(CONFIG, first))
    resumed = [*first[:-1], "max_steps=4", "checkpointer.resume_from_checkpoint=auto"]
    load_recipe("ppo_full_finetune_single_device").main(load_config(CONFIG, resumed))
    assert losses(read_log(broken))[-4:] == pytest.approx(losses(read_log(straight)), rel=1e-6)
    assert torch.equal(_weights(broken / "value" / "step_4")["score.weight"],
                       _weights(straight / "value" / "step_4")["score.weight"])  # fmt: skip


def test_a_language_model_as_reward_model_is_refused(tiny_checkpoint, demo_dir, reward_model_dir, tmp_path):
    overrides = ppo_overrides(tiny_checkpoint, demo_dir, tmp_path, reward_model_dir, "max_steps=1")
    cfg = load_config(CONFIG, [*overrides, f"reward_checkpointer.checkpoint_dir={tiny_checkpoint}"])
    with pytest.raises(
        ValueError, match=r"reward_checkpointer.checkpoint_dir: .* holds a language model, not a reward"
    ):
        load_recipe("ppo_full_finetune_single_device").main(cfg)


def test_sizes_that_do_not_split_a_trajectory_are_refused_before_anything_loads(tmp_path):
    with pytest.raises(ConfigError, match=r"batch_size \(4\) must be a multiple of ppo_batch_size \(3\)"):
        load_config(CONFIG, ["ppo_batch_size=3"]).settings(
            load_recipe("ppo_full_finetune_single_device").SETTINGS
        )
