"""The checks of a GRPO config's `rewards` section that need only its names and weights (torch-free).

`ftune.rewards.check_rewards` makes them when the RewardSet is built, and `ftune run` makes them from
the config before torch is imported (`ftune.settings.GRPOSettings.section_problems`): one wording.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from typing import Any

NO_REWARDS = (
    "rewards: none given; name at least one, e.g. rewards: {correct: {_component_: "
    "ftune.rewards.ExactMatch, field: answer}}."
)
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def is_number(value: Any) -> bool:
    """An int, float or other real number (numpy's too), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def name_problems(rewards: Mapping[str, Any]) -> list[str]:
    """A reward name that cannot name the logged metrics ``rewards/<name>/mean`` and ``/std``."""
    return [
        f"rewards.rewards.{name}: the name must be letters, digits, '_', '.' or '-' (it names the logged metrics "
        "rewards/<name>/mean and /std); rename it."
        for name in rewards
        if not isinstance(name, str) or not _NAME.fullmatch(name)
    ]


def weight_problems(rewards: Mapping[str, Any], weights: Mapping[str, Any]) -> list[str]:
    """Weights that are not one finite number per reward, or all zero."""
    problems = []
    if set(weights) != set(rewards):
        missing, extra = (
            sorted(set(rewards) - set(weights), key=str),
            sorted(set(weights) - set(rewards), key=str),
        )
        problems.append(
            f"rewards.weights: give one weight per reward, named as in rewards {sorted(rewards, key=str)}; missing: "
            f"{missing}, not a reward: {extra} (1.0 each for an unweighted sum)."
        )
    bad = {k: w for k, w in weights.items() if not is_number(w) or not math.isfinite(w)}
    if bad:
        problems.append(
            f"rewards.weights: {bad} are not finite numbers; give a number per reward (a negative weight "
            "makes the reward a penalty)."
        )
    elif weights and all(w == 0 for w in weights.values()):
        problems.append(
            f"rewards.weights: all zero ({dict(weights)}): every total reward would be 0 and GRPO would "
            "learn nothing; give at least one reward a non-zero weight."
        )
    return problems
