"""reasoning-gym's procedural tasks as GRPO prompts: generated from a seed, scored by the task's own scorer.

A config names a task and how many prompts to generate; nothing is downloaded::

    dataset:
      _component_: ftune.datasets.reasoning_gym_dataset
      task: basic_arithmetic
      size: 500
      seed: 0
      new_system_prompt: "Answer inside <answer></answer>."
    rewards:
      _component_: ftune.rewards.RewardSet
      rewards: {correct: {_component_: ftune.rewards.ReasoningGymScore, answer_tag: answer}}
      weights: {correct: 1.0}

Each record is ``{"prompt": question, "answer", "metadata", "task", "task_config"}``: the rewards get
all but the prompt as ``sample``. reasoning-gym is an optional dependency (``pip install ftune[agents]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ftune.config.errors import did_you_mean
from ftune.datasets.prompts import PromptDataset

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer


def reasoning_gym_records(
    task: str, *, size: int, seed: int, task_config: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """`size` records of reasoning-gym's `task`, generated from `seed` (the same seed: the same records).

    Raises:
        ImportError: reasoning-gym is not installed.
        ValueError: an unknown task (with the closest names), a size or seed that is not an int, a
            task_config the task refuses.
    """
    try:
        import reasoning_gym
    except ImportError:
        raise ImportError(
            "reasoning_gym_dataset needs the reasoning-gym package, which is not installed; install it with "
            "pip install 'ftune[agents]' (or pip install reasoning-gym)."
        ) from None
    tasks = sorted(reasoning_gym.factory.DATASETS)
    if task not in tasks:
        raise ValueError(
            f"dataset.task: reasoning-gym has no task {task!r}.{did_you_mean(task, tasks)} It has {len(tasks)}: "
            f"{', '.join(tasks[:12])}, ... (python -c 'import reasoning_gym; print(sorted(reasoning_gym.factory.DATASETS))')."
        )
    for key, value, low in (("size", size, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"dataset.{key} must be an int >= {low}, got {value!r}.")
    config = dict(task_config or {})
    try:
        data = reasoning_gym.create_dataset(task, size=size, seed=seed, **config)
    except (TypeError, ValueError, AssertionError) as e:
        raise ValueError(f"dataset.task_config: reasoning-gym's {task!r} refuses {config}: {e}") from None
    return [
        {
            "prompt": e["question"],
            "answer": e["answer"],
            "metadata": e["metadata"],
            "task": task,
            "task_config": config,
        }
        for e in data
    ]


def reasoning_gym_dataset(
    tokenizer: Tokenizer,
    *,
    task: str,
    size: int,
    seed: int,
    task_config: dict[str, Any] | None = None,
    new_system_prompt: str | None = None,
    max_prompt_len: int | None = None,
) -> PromptDataset:
    """A reasoning-gym task's prompts for the GRPO recipes (see the module docstring).

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        task: the task's name in reasoning-gym (``basic_arithmetic``, ``chain_sum``, ``gsm_symbolic``...).
        size: how many prompts to generate.
        seed: the generator's seed.
        task_config: the task's own settings (its difficulty...), passed to ``reasoning_gym.create_dataset``.
        new_system_prompt: a system message before every prompt (e.g. how to format the answer).
        max_prompt_len: keep only each prompt's last this many tokens (null: all).
    """
    records = reasoning_gym_records(task, size=size, seed=seed, task_config=task_config)
    return PromptDataset(
        records,
        tokenizer,
        prompt_column="prompt",
        new_system_prompt=new_system_prompt,
        max_prompt_len=max_prompt_len,
        source=f"reasoning-gym {task}",
    )
