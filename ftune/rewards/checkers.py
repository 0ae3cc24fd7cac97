"""Rewards that score with the field's own checkers: math-verify's answer equivalence, reasoning-gym's scorers.

Both are optional dependencies (``pip install ftune[agents]``), imported when the reward is built, so a
config naming one fails at build time with the install command, not at the first rollout.

Time limits: a reward runs under the RewardSet's ``time_limit_s`` (`ftune.config.time_limit`, a
SIGALRM interval timer). math-verify has its own timeouts built on ``signal.alarm``, which shares that
timer: calling it with them would cancel ftune's limit. So :class:`MathVerify` turns math-verify's
timeouts off (``parsing_timeout=None``, ``timeout_seconds=None``; math-verify logs one warning that
they are off) and ftune's limit bounds the whole call: sympy is Python, so the timer stops it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ftune.rewards.builtins import _check_field, _field, _reference


def _missing(package: str, reward: str) -> ImportError:
    return ImportError(
        f"{reward} needs the {package} package, which is not installed; install it with "
        f"pip install 'ftune[agents]' (or pip install {package})."
    )


def _reasoning_gym() -> Any:
    try:
        import reasoning_gym
    except ImportError:
        raise _missing("reasoning-gym", "ReasoningGymScore") from None
    return reasoning_gym


class MathVerify:
    """1.0 when math-verify finds the completion's final answer equal to the sample's `field`, else 0.0.

    Both sides go through ``math_verify.parse`` (LaTeX, ``\\boxed{}``, plain expressions) and are compared
    with ``math_verify.verify`` (symbolic and numeric equality: ``\\frac{1}{2}`` equals ``0.5``).

    Args:
        field: the sample field holding the reference answer.
        float_rounding: decimal places numbers are rounded to before comparing (math-verify's).
        strict: math-verify's strict mode (variables and relations must match exactly).

    Raises:
        ImportError: math-verify is not installed (the message has the install command).
    """

    def __init__(self, field: str, *, float_rounding: int = 6, strict: bool = True) -> None:
        _check_field(field, "MathVerify")
        if isinstance(float_rounding, bool) or not isinstance(float_rounding, int) or float_rounding < 0:
            raise ValueError(f"MathVerify: float_rounding must be an int >= 0, got {float_rounding!r}.")
        if not isinstance(strict, bool):
            raise ValueError(f"MathVerify: strict must be true or false, got {strict!r}.")
        try:
            import math_verify
        except ImportError:
            raise _missing("math-verify", "MathVerify") from None
        self._mv = math_verify
        self.field, self.float_rounding, self.strict = field, float_rounding, strict

    def _parse(self, text: str, **kwargs: Any) -> list[Any]:
        return self._mv.parse(text, parsing_timeout=None, **kwargs)  # ftune's time limit bounds the call

    def __call__(self, prompt: str, completion: str, sample: Mapping[str, Any]) -> float:
        reference = _reference(sample, self.field, "MathVerify")
        # a bare LaTeX reference ("\\sqrt{2}", common in datasets) is read as math, as if in $...$
        # (math only: no fallback to the raw string, which would make any text a reference)
        gold = self._parse(reference) or self._parse(f"${reference}$", fallback_mode="no_fallback")
        if not gold:
            raise ValueError(
                f"MathVerify: math-verify finds no answer in the sample's {self.field!r} ({reference[:60]!r}); "
                "give the reference as a number, an expression or LaTeX, or use ExactMatch for text answers"
            )
        answer = self._parse(completion)
        if not answer:
            return 0.0
        ok = self._mv.verify(
            gold, answer, float_rounding=self.float_rounding, strict=self.strict, timeout_seconds=None
        )
        return float(ok)


@lru_cache(maxsize=64)
def _scorer(task: str, config_json: str) -> Any:
    """A reasoning-gym task's ``score_answer``, for the task built with the config the data used."""
    return _reasoning_gym().create_dataset(task, size=1, seed=0, **json.loads(config_json)).score_answer


class ReasoningGymScore:
    """reasoning-gym's own score of the completion's answer for the sample's task (0.0 to 1.0).

    The samples are those of ``ftune.datasets.reasoning_gym_dataset``: they carry ``answer``,
    ``metadata``, ``task`` and ``task_config``, and the task's scorer (``score_answer``) reads them.

    Args:
        answer_tag: the answer is the text of the completion's last ``<answer_tag>...</answer_tag>`` (the
            layout reasoning-gym's prompts ask for: ``answer``); 0.0 if there is none. None: the whole
            completion, stripped, is the answer.

    Raises:
        ImportError: reasoning-gym is not installed (the message has the install command).
    """

    def __init__(self, *, answer_tag: str | None) -> None:
        if answer_tag is not None and not (
            isinstance(answer_tag, str) and re.fullmatch(r"[A-Za-z_][\w-]*", answer_tag)
        ):
            raise ValueError(
                f"ReasoningGymScore: answer_tag must be a tag name such as answer (or null: the whole completion), "
                f"got {answer_tag!r}."
            )
        _reasoning_gym()
        self.answer_tag = answer_tag
        self._tag = re.compile(rf"<{answer_tag}>(.*?)</{answer_tag}>", re.S) if answer_tag else None

    def answer(self, completion: str) -> str | None:
        """The answer part of a completion (None: the tag is missing)."""
        if self._tag is None:
            return completion.strip()
        found = self._tag.findall(completion)
        return found[-1].strip() if found else None

    def __call__(self, prompt: str, completion: str, sample: Mapping[str, Any]) -> float:
        task = _field(sample, "task", "ReasoningGymScore")
        config = _field(sample, "task_config", "ReasoningGymScore")
        entry = {
            "question": prompt,
            "answer": _field(sample, "answer", "ReasoningGymScore"),
            "metadata": _field(sample, "metadata", "ReasoningGymScore"),
        }
        answer = self.answer(completion)
        if answer is None:
            return 0.0
        return float(_scorer(task, json.dumps(config, sort_keys=True))(answer, entry))
