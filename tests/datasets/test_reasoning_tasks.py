"""reasoning-gym tasks as GRPO prompts: seeded, records carry what the task's scorer reads."""

import pytest
import reasoning_gym

from ftune.config import instantiate
from ftune.datasets import PromptDataset, reasoning_gym_records
from ftune.rewards import ReasoningGymScore


def test_records_equal_reasoning_gyms_own_generation():
    records = reasoning_gym_records("basic_arithmetic", size=4, seed=3)
    theirs = list(reasoning_gym.create_dataset("basic_arithmetic", size=4, seed=3))
    assert [r["prompt"] for r in records] == [e["question"] for e in theirs]
    assert [(r["answer"], r["metadata"]) for r in records] == [(e["answer"], e["metadata"]) for e in theirs]
    assert records == reasoning_gym_records("basic_arithmetic", size=4, seed=3)  # the seed fixes them
    assert records != reasoning_gym_records("basic_arithmetic", size=4, seed=4)
    assert {r["task"] for r in records} == {"basic_arithmetic"} and records[0]["task_config"] == {}


class _Tokenizer:
    """Characters as tokens: what a PromptDataset asks of a tokenizer."""

    def tokenize_messages(self, messages, *, add_eos, add_generation_prompt):
        text = "".join(f"<{m.role}>{m.content}" for m in messages) + (
            "<assistant>" if add_generation_prompt else ""
        )
        return [ord(c) for c in text], None


def test_a_prompt_dataset_whose_samples_the_reward_scores():
    tokenizer = _Tokenizer()
    ds = instantiate(
        {
            "_component_": "ftune.datasets.reasoning_gym_dataset",
            "task": "chain_sum",
            "size": 3,
            "seed": 0,
            "task_config": {"min_terms": 2, "max_terms": 3},
            "new_system_prompt": "Answer in <answer></answer>.",
        },
        tokenizer,
    )
    assert isinstance(ds, PromptDataset) and len(ds) == 3
    item = ds[0]
    assert (
        item["prompt"]
        == reasoning_gym_records("chain_sum", size=3, seed=0, task_config={"min_terms": 2, "max_terms": 3})[
            0
        ]["prompt"]
    )
    assert set(item["sample"]) == {"answer", "metadata", "task", "task_config"}
    reward = ReasoningGymScore(answer_tag="answer")
    right = f"Thinking... <answer>{item['sample']['answer']}</answer>"
    assert reward(item["prompt"], right, item["sample"]) == 1.0
    assert reward(item["prompt"], "<answer>-99999</answer>", item["sample"]) == 0.0
    assert reward(item["prompt"], item["sample"]["answer"], item["sample"]) == 0.0  # no tag: no answer
    whole = ReasoningGymScore(answer_tag=None)
    assert whole(item["prompt"], f"  {item['sample']['answer']}\n", item["sample"]) == 1.0


def test_the_score_is_reasoning_gyms_own():
    records = reasoning_gym_records("basic_arithmetic", size=5, seed=1)
    data = reasoning_gym.create_dataset("basic_arithmetic", size=5, seed=1)
    reward = ReasoningGymScore(answer_tag=None)
    for r, entry in zip(records, data):
        sample = {k: v for k, v in r.items() if k != "prompt"}
        for answer in (entry["answer"], "7", entry["answer"] + ".0", "nonsense"):
            assert reward(r["prompt"], answer, sample) == data.score_answer(answer, entry)


def test_unknown_task_and_bad_arguments_are_named():
    with pytest.raises(
        ValueError,
        match=r"dataset.task: reasoning-gym has no task 'basic_arithmetik'. Did you mean 'basic_arithmetic'\?",
    ):
        reasoning_gym_records("basic_arithmetik", size=1, seed=0)
    with pytest.raises(ValueError, match=r"dataset.size must be an int >= 1, got 0"):
        reasoning_gym_records("basic_arithmetic", size=0, seed=0)
    with pytest.raises(
        ValueError, match=r"dataset.task_config: reasoning-gym's 'basic_arithmetic' refuses \{'no_such': 1\}"
    ):
        reasoning_gym_records("basic_arithmetic", size=1, seed=0, task_config={"no_such": 1})
    with pytest.raises(ValueError, match=r"answer_tag must be a tag name such as answer .* got '<a>'"):
        ReasoningGymScore(answer_tag="<a>")
