"""Several rewards on a rollout: the weighted total per completion, and the figures a step logs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ftune.config.reward_checks import NO_REWARDS, is_number, name_problems, weight_problems
from ftune.config.time_limit import TimeLimitError, call_with_time_limit, check_time_limit

# The time a reward may take on one completion by default (RewardSet's `time_limit_s`, in seconds):
# a reward on one completion takes microseconds to milliseconds; a reward still running after this
# long is stuck (a backtracking regex, a loop), not slow.
REWARD_TIME_LIMIT_S = 10.0

Reward = Callable[[str, str, Mapping[str, Any]], float]


class RewardError(ValueError):
    """A reward raised or returned something other than a finite number (one message, no traceback)."""

    user_facing = True


def _cut(text: str, limit: int) -> str:
    """`text` on one line, at most `limit` characters (the end replaced by ``...``)."""
    text = " ".join(text.split()) if "\n" in text and len(text) > limit else text
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(text: str, limit: int = 80) -> str:
    return repr(_cut(text, limit))


def check_rewards(rewards: Mapping[str, Any], weights: Mapping[str, Any]) -> None:
    """The config-time checks of a set of rewards and their weights, all problems in one message.

    Names are the keys of one mapping (unique by construction; a YAML file repeating a key is refused
    when loaded) and become metric names (``rewards/<name>/mean``), so they are letters, digits, ``_``,
    ``.`` and ``-``. Weights are finite numbers, one per reward; a negative weight is allowed (a reward
    used as a penalty), all zero is not (every total would be 0: no learning signal).

    Raises:
        ValueError: naming every problem found.
    """
    if not rewards:
        raise ValueError(NO_REWARDS)
    problems = name_problems(
        rewards
    )  # the checks `ftune run` makes from the config (ftune.config.reward_checks)
    problems += [
        f"rewards.rewards.{name}: {type(r).__name__} {r!r} is not callable; give a reward component "
        "(prompt, completion, sample) -> float, e.g. {_component_: ftune.rewards.ExactMatch, field: answer}."
        for name, r in rewards.items()
        if not callable(r)
    ]
    problems += weight_problems(rewards, weights)
    if problems:
        raise ValueError(" ".join(problems))


def score_rewards(
    rewards: Mapping[str, Reward],
    weights: Mapping[str, float],
    prompts: Sequence[str],
    completions: Sequence[str],
    samples: Sequence[Mapping[str, Any]],
    *,
    time_limit_s: float | None = REWARD_TIME_LIMIT_S,
) -> tuple[list[float], dict[str, list[float]]]:
    """Each reward of each completion, and their weighted sum.

    Args:
        rewards: name -> reward callable.
        weights: name -> weight (the same names).
        prompts, completions, samples: one entry per completion (a prompt's G completions repeat
            its prompt and sample).
        time_limit_s: the seconds one reward may take on one completion (None: no limit); a call
            still running then is stopped (`ftune.config.time_limit`).

    A reward with a ``score_batch(prompts, completions, samples) -> list[float]`` method (a reward model,
    ``ftune.evaluation.RewardModel``) is called once for all the completions, under ``time_limit_s`` times
    their number.

    Returns:
        ``(total, per_reward)``: the weighted sums, and each reward's values, in completion order.

    Raises:
        ValueError: what :func:`check_rewards` refuses; prompts, completions and samples of different
            lengths.
        RewardError: a reward that raised, returned a non-number or a non-finite number, or ran past
            `time_limit_s`, naming the reward, the sample and the value.
    """
    check_rewards(rewards, weights)
    time_limit_s = check_time_limit(time_limit_s, "rewards.time_limit_s")
    if not len(prompts) == len(completions) == len(samples):
        raise ValueError(
            f"score_rewards: {len(prompts)} prompts, {len(completions)} completions and {len(samples)} samples; "
            "pass one of each per completion."
        )
    per: dict[str, list[float]] = {name: [] for name in rewards}
    n = len(completions)
    batched = {name for name, reward in rewards.items() if callable(getattr(reward, "score_batch", None))}
    for name in batched:
        per[name] = _score_batch(name, rewards[name], prompts, completions, samples, time_limit_s)
    for i, (prompt, completion, sample) in enumerate(zip(prompts, completions, samples)):
        for name, reward in rewards.items():
            if name in batched:
                continue
            where = (
                f"reward {name!r} on completion {i + 1} of {n} (prompt {_short(prompt)}, completion "
                f"{_short(completion)})"
            )
            try:
                value = call_with_time_limit(
                    reward,
                    prompt,
                    completion,
                    sample,
                    seconds=time_limit_s,
                    message=lambda where=where: where,
                )
            except TimeLimitError:
                raise RewardError(
                    f"{where} ran longer than rewards.time_limit_s={time_limit_s:g} s and was stopped: a reward "
                    "takes milliseconds unless it is stuck (a regex that backtracks, such as (a+)+$, or a loop). "
                    "Fix the reward, or raise rewards.time_limit_s (null: no limit)."
                ) from None
            except Exception as e:  # noqa: BLE001 - any failure of user code is reported the same way
                text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
                raise RewardError(
                    f"{where} raised {type(e).__name__}: {text}. Fix the reward or the data it reads "
                    "(--debug shows the traceback)."
                ) from e
            per[name].append(_finite(where, value))
    total = [sum(weights[name] * per[name][i] for name in rewards) for i in range(len(completions))]
    return total, per


def _score_batch(
    name: str,
    reward: Any,
    prompts: Sequence[str],
    completions: Sequence[str],
    samples: Sequence[Mapping[str, Any]],
    time_limit_s: float | None,
) -> list[float]:
    """A batched reward's values (one ``score_batch`` call for every completion: a reward model's forwards),
    under the time limit of all its completions together, checked as the per-completion rewards are."""
    n = len(completions)
    where = f"reward {name!r} ({type(reward).__name__}.score_batch of {n} completions)"
    limit = None if time_limit_s is None else time_limit_s * max(n, 1)
    try:
        values = call_with_time_limit(
            reward.score_batch, prompts, completions, samples, seconds=limit, message=lambda: where
        )
    except TimeLimitError:
        raise RewardError(
            f"{where} ran longer than rewards.time_limit_s={time_limit_s:g} s a completion and was stopped. "
            "Raise rewards.time_limit_s (null: no limit), or give the reward a faster device."
        ) from None
    except Exception as e:  # noqa: BLE001 - any failure of a component is reported the same way
        raise RewardError(f"{where} raised {type(e).__name__}: {e} (--debug shows the traceback).") from e
    values = list(values) if isinstance(values, (list, tuple)) else values
    if not isinstance(values, list) or len(values) != n:
        raise RewardError(
            f"{where} returned {_cut(repr(values), 60)}; a batched reward returns a list of {n} numbers, one a "
            "completion. Fix the reward."
        )
    return [
        _finite(f"{where} for completion {i + 1} of {n} (completion {_short(completions[i])})", value)
        for i, value in enumerate(values)
    ]


def _finite(where: str, value: Any) -> float:
    """`value` as a float when it is a finite number; otherwise the one error every reward path raises."""
    if not is_number(value) or not math.isfinite(value):
        raise RewardError(
            f"{where} returned {_cut(' '.join(repr(value).split()), 60)} ({type(value).__name__}); a reward "
            "must return a finite number (int or float). Fix the reward."
        )
    return float(value)


def reward_stats(
    per_reward: Mapping[str, Sequence[float]], total: Sequence[float], group_size: int
) -> dict[str, float]:
    """The figures a GRPO step logs about its rewards.

    Returns:
        ``rewards/<name>/mean`` and ``/std`` for each reward, ``reward/mean`` and ``/std`` of the
        total (population std), and ``reward/zero_std_groups``: the share of prompts whose G
        completions all got the same total (no learning signal from them).

    Raises:
        ValueError: `group_size` < 1 or not dividing the number of completions.
    """
    if (
        isinstance(group_size, bool)
        or not isinstance(group_size, int)
        or group_size < 1
        or len(total) % group_size
    ):
        raise ValueError(
            f"reward_stats: group_size must be an int >= 1 dividing the {len(total)} completions, got {group_size!r}."
        )
    out: dict[str, float] = {}
    for name, values in [*per_reward.items(), ("", total)]:
        key = f"rewards/{name}" if name else "reward"
        out[f"{key}/mean"] = statistics.fmean(values) if values else 0.0
        out[f"{key}/std"] = statistics.pstdev(values) if values else 0.0
    groups = [total[i : i + group_size] for i in range(0, len(total), group_size)]
    out["reward/zero_std_groups"] = sum(max(g) == min(g) for g in groups) / len(groups) if groups else 0.0
    return out
