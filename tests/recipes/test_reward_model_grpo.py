"""A trained reward model as a GRPO reward: the component's scores, and the shipped config's 2 steps.

A tiny LoRA reward model is trained by reward_model_single_device (2 steps); ftune.evaluation.RewardModel
loads its step folder and scores (prompt, completion) rows as the reward model read its training pairs,
in batches; smollm2/135M_reward_model_lora_grpo then trains 2 GRPO steps with it beside the exact match.
"""

import math

import pytest
import torch
from conftest import load_recipe  # tests/recipes/conftest.py (at import time: the module of this folder)
from features import losses, read_log
from tiny_checkpoint import tiny_overrides

from ftune.config import load_config
from ftune.data.messages import Message
from ftune.evaluation import RewardModel
from ftune.models.smollm2 import smollm2_tokenizer
from ftune.rewards import RewardSet
from ftune.training import reward_scores

GRPO_CONFIG = "smollm2/135M_reward_model_lora_grpo"
PROMPTS = ["Rewrite the date 2023-07-14 as DD/MM/YYYY.", "Rewrite the date 1999-01-02 as DD/MM/YYYY."]
COMPLETIONS = ["14/07/2023", "02/01/1999 is the date, written out", "no"]


@pytest.fixture(scope="module")
def reward_model_dir(tiny_checkpoint, demo_dir, tmp_path_factory):
    """A LoRA reward model of the tiny checkpoint, 2 steps of the shipped config (its step folder)."""
    out = tmp_path_factory.mktemp("rm")
    config = "smollm2/135M_demo_lora_rm"
    cfg = load_config(config, [*tiny_overrides(tiny_checkpoint, demo_dir, out), "max_steps=2"])
    load_recipe("reward_model_single_device").main(cfg)
    return out / "step_2"


def _component(tiny_checkpoint, reward_model_dir, **kwargs) -> RewardModel:
    tokenizer = smollm2_tokenizer(str(tiny_checkpoint), max_seq_len=64)
    return RewardModel(tokenizer, checkpoint_dir=tiny_checkpoint, adapter_dir=reward_model_dir, **kwargs)


def test_scores_are_the_models_on_training_style_rows_in_any_batch_size(tiny_checkpoint, reward_model_dir):
    one = _component(tiny_checkpoint, reward_model_dir, batch_size=1)
    many = _component(tiny_checkpoint, reward_model_dir, batch_size=16)
    prompts = [p for p in PROMPTS for _ in COMPLETIONS]
    completions = COMPLETIONS * len(PROMPTS)
    samples = [{}] * len(prompts)
    scores = many.score_batch(prompts, completions, samples)
    assert scores == pytest.approx(one.score_batch(prompts, completions, samples), rel=1e-5, abs=1e-6)
    assert len(set(round(s, 6) for s in scores)) > 1, scores
    # A row as the reward model's training pairs render it: user prompt, assistant answer, end of sequence.
    tokens, _ = many.tokenizer.tokenize_messages(
        [Message("user", PROMPTS[0]), Message("assistant", COMPLETIONS[0])], add_eos=True
    )
    row = torch.tensor([list(tokens)])
    with torch.no_grad():
        alone = reward_scores(many.model, many.model.hidden(row), row)
    assert scores[0] == pytest.approx(float(alone[0]), rel=1e-5, abs=1e-6)
    assert one("p", "c", {}) == pytest.approx(many.score_batch(["p"], ["c"], [{}])[0], rel=1e-5, abs=1e-6)


def test_weighted_with_rule_rewards_in_a_reward_set(tiny_checkpoint, reward_model_dir):
    model = _component(tiny_checkpoint, reward_model_dir)
    rewards = RewardSet(
        {"preference": model, "short": lambda p, c, s: -len(c) / 10}, {"preference": 0.5, "short": 2.0}
    )
    prompts, samples = [PROMPTS[0]] * 3, [{}] * 3
    total, per = rewards(prompts, COMPLETIONS, samples)
    scores = model.score_batch(prompts, COMPLETIONS, samples)
    assert per["preference"] == pytest.approx(scores)
    assert total == pytest.approx([0.5 * s - 2.0 * len(c) / 10 for s, c in zip(scores, COMPLETIONS)])


def test_a_language_model_is_refused(tiny_checkpoint):
    tokenizer = smollm2_tokenizer(str(tiny_checkpoint))
    with pytest.raises(ValueError, match="holds a language model, not a reward model"):
        RewardModel(tokenizer, checkpoint_dir=tiny_checkpoint)


def test_the_shipped_reward_model_grpo_config_trains_2_steps(
    tiny_checkpoint, demo_dir, reward_model_dir, tmp_path
):

    out = tmp_path / "grpo"
    small = ("max_steps=2", "group_size=4", "max_new_tokens=6")  # the config's own rewards, not GRPO_TINY's
    where = f"rewards.rewards.preference.adapter_dir={reward_model_dir}"
    cfg = load_config(GRPO_CONFIG, [*tiny_overrides(tiny_checkpoint, demo_dir, out), *small, where])
    load_recipe("lora_grpo_single_device").main(cfg)
    logs = read_log(out)
    steps = [r for r in logs if "loss" in r]
    assert len(steps) == 2 and all(math.isfinite(x) for x in losses(logs))
    for row in steps:  # the total is the weighted sum of the two rewards' means
        assert {"rewards/preference/mean", "rewards/correct/mean"} <= row.keys(), sorted(row)
        assert row["rewards/preference/std"] > 0, "the reward model gave every completion the same score"
        expected = row["rewards/correct/mean"] + 0.5 * row["rewards/preference/mean"]
        assert row["reward"] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert (out / "step_2" / "adapter_model.safetensors").is_file()
