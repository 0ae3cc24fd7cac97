"""The rewards of a run and their weights, as one component (the ``rewards`` section of a GRPO config)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ftune.config.time_limit import check_time_limit
from ftune.rewards import builtins
from ftune.rewards.scoring import REWARD_TIME_LIMIT_S, Reward, check_rewards, score_rewards


class RewardSet:
    """Named rewards and their weights; calling it scores completions with every reward.

    A GRPO config builds it as its ``rewards`` section::

        rewards:
          _component_: ftune.rewards.RewardSet
          rewards:
            correct: {_component_: ftune.rewards.ExactMatch, field: answer}
            short: {_component_: ftune.rewards.LengthPenalty, max_chars: 40}
          weights: {correct: 1.0, short: 0.1}
          time_limit_s: 10.0

    Args:
        rewards: name -> reward callable ``(prompt, completion, sample) -> float``. The names name
            the logged metrics ``rewards/<name>/mean`` and ``/std``.
        weights: name -> weight, one per reward (1.0 each for a plain sum; negative: a penalty).
        time_limit_s: the seconds one reward may take on one completion (default 10; null: no
            limit). A reward still running then is stopped and the run ends with an error naming
            the reward and the completion (a regex that backtracks, a loop). Enforced on the main
            thread, where the recipes score rollouts (`ftune.config.time_limit`).

    Raises:
        ValueError: every problem :func:`ftune.rewards.check_rewards` finds, in one message.
    """

    def __init__(
        self,
        rewards: Mapping[str, Reward],
        weights: Mapping[str, float],
        time_limit_s: float | None = REWARD_TIME_LIMIT_S,
    ) -> None:
        check_rewards(rewards, weights)
        self.rewards, self.weights = dict(rewards), dict(weights)
        self.time_limit_s = check_time_limit(time_limit_s, "rewards.time_limit_s")

    @property
    def names(self) -> list[str]:
        return list(self.rewards)

    def __call__(
        self, prompts: Sequence[str], completions: Sequence[str], samples: Sequence[Mapping[str, Any]]
    ) -> tuple[list[float], dict[str, list[float]]]:
        """``(total, per_reward)`` of each completion: see :func:`ftune.rewards.score_rewards`."""
        return score_rewards(
            self.rewards, self.weights, prompts, completions, samples, time_limit_s=self.time_limit_s
        )

    def __repr__(self) -> str:
        return f"RewardSet({', '.join(f'{n}={self.weights[n]}' for n in self.rewards)})"


_SETS = ("ftune.rewards.RewardSet", "ftune.rewards.reward_set.RewardSet")


def builtin_reward_problems(cfg: Any) -> list[str]:
    """The arguments of the built-in rewards (`ftune.rewards.builtins`) in a config's `rewards` section that
    their constructors refuse (a pattern that is not a regex, a negative tolerance...), found by building
    them: they are plain Python, so `ftune run` and `ftune validate` do it before torch is imported. A
    missing or unknown argument is the signature check's to name; other rewards are built by the run.

    Args:
        cfg: the loaded config (`ftune.config.Config`).
    """
    section = cfg.to_dict().get("rewards")
    rewards = (
        section.get("rewards") if isinstance(section, dict) and section.get("_component_") in _SETS else None
    )
    problems = []
    for name, node in (rewards if isinstance(rewards, dict) else {}).items():
        component = node.get("_component_") if isinstance(node, dict) else None
        if not (isinstance(component, str) and component.startswith("ftune.rewards.")):
            continue
        cls_name = component.rpartition(".")[2]
        if cls_name not in builtins.BUILTINS:
            continue
        args = {k: v for k, v in node.items() if not k.startswith("_")}
        if any(isinstance(v, dict) for v in args.values()) or set(node) - {"_component_", *args}:
            continue  # a nested component or _partial_: built by the run
        try:
            getattr(builtins, cls_name)(**args)
        except TypeError:
            continue  # an argument missing or unknown: the signature check names it
        except ValueError as e:
            key = f"rewards.rewards.{name}"
            problems.append(f"{key}: {e} ({cfg.where(key)})")
    return problems
