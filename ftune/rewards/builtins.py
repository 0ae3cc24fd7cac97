"""The built-in rewards: exact match, a format (regex) match, a numeric final answer, a length penalty.

Each is a class whose instance is the reward callable ``(prompt, completion, sample) -> float``;
arguments are checked when it is built (at config time), not at the first rollout.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ftune.config.record_checks import reference_problem

# A number as people write answers: a minus sign only where it cannot be subtraction (not after a
# word character or a closing bracket: "12-4" holds 12 and 4, "x = -4" holds -4), digits and commas,
# an optional decimal part. Commas are thousands separators only in groups of three ("1,234,567");
# otherwise they separate numbers ("1,2,3" ends with 3). "72." at the end of a sentence is 72.
_NUMBER = re.compile(r"(?:(?<![\w)\]])-)?\d[\d,]*(?:\.\d+)?")
_GROUPED = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def _field(sample: Mapping[str, Any], field: str, reward: str) -> Any:
    if field not in sample:
        raise KeyError(
            f"{reward} reads the sample's field {field!r}, which this sample does not have (its fields: "
            f"{sorted(sample)}); set the reward's `field` to one of them"
        )
    return sample[field]


def _reference(sample: Mapping[str, Any], field: str, reward: str) -> str:
    value = _field(sample, field, reward)
    problem = reference_problem(value, field)
    if problem is not None:
        raise ValueError(f"{reward}: {problem}")
    return str(value)


def _check_field(field: Any, reward: str) -> None:
    if not isinstance(field, str) or not field:
        raise ValueError(
            f"{reward}: field must be the name of the sample field holding the reference (e.g. "
            f"field: answer), got {field!r}."
        )


def _squeeze(text: str) -> str:
    return " ".join(text.split())


class ExactMatch:
    """1.0 when the completion equals the sample's `field`, else 0.0.

    By default whitespace runs are collapsed to one space and the ends stripped on both sides, as the
    quickstart's exact-match evaluation compares (``ftune.datasets.demo.exact_match``), so a reward of 1
    is a held-out hit.

    Args:
        field: the sample field holding the reference answer.
        normalize_whitespace: collapse whitespace runs and strip the ends before comparing; False
            compares the texts as they are.
        ignore_case: compare case-insensitively (``str.casefold``).
    """

    def __init__(self, field: str, *, normalize_whitespace: bool = True, ignore_case: bool = False) -> None:
        _check_field(field, "ExactMatch")
        for name, value in (("normalize_whitespace", normalize_whitespace), ("ignore_case", ignore_case)):
            if not isinstance(value, bool):
                raise ValueError(f"ExactMatch: {name} must be true or false, got {value!r}.")
        self.field, self.normalize_whitespace, self.ignore_case = field, normalize_whitespace, ignore_case

    def _norm(self, text: str) -> str:
        text = _squeeze(text) if self.normalize_whitespace else text
        return text.casefold() if self.ignore_case else text

    def __call__(self, prompt: str, completion: str, sample: Mapping[str, Any]) -> float:
        reference = _reference(sample, self.field, "ExactMatch")
        return float(self._norm(completion) == self._norm(reference))


class RegexMatch:
    """1.0 when `pattern` is found in the completion (``re.search``, ``.`` matching newlines: anchor
    with ``^``/``$`` or ``\\A``/``\\Z`` to require a whole format), else 0.0.

    Args:
        pattern: a Python regular expression, compiled when the reward is built.
    """

    def __init__(self, pattern: str) -> None:
        try:
            self.regex = re.compile(pattern, re.DOTALL)
        except (re.error, TypeError) as e:
            raise ValueError(
                f"RegexMatch: pattern {pattern!r} is not a valid regular expression: {e}."
            ) from None
        self.pattern = pattern

    def __call__(self, prompt: str, completion: str, sample: Mapping[str, Any]) -> float:
        return float(self.regex.search(completion) is not None)


def final_number(text: str) -> float | None:
    """The final answer of a GSM8K-style text, or None when it holds no number.

    The rule: the text after the last ``####`` if there is one, else the whole text; in it, the last
    number (see ``_NUMBER``: "-1,234.5" is -1234.5, "12-4" ends with 4, "1,2,3" ends with 3).
    """
    tail = text.rsplit("####", 1)[1] if "####" in text else text
    found = _NUMBER.findall(tail)
    if not found:
        return None
    last = found[-1].rstrip(",")
    if _GROUPED.fullmatch(last):
        return float(last.replace(",", ""))
    return float(last.rsplit(",", 1)[1] if "," in last else last)


class NumericAnswer:
    """1.0 when the completion's final number (:func:`final_number`) equals the reference's (the
    sample's `field`, read the same way, so a GSM8K answer "...\\n#### 72" works), else 0.0.

    Args:
        field: the sample field holding the reference answer.
        tolerance: the largest absolute difference still counted equal.
    """

    def __init__(self, field: str, tolerance: float = 1e-6) -> None:
        _check_field(field, "NumericAnswer")
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)):
            raise ValueError(f"NumericAnswer: tolerance must be a finite number >= 0, got {tolerance!r}.")
        if not math.isfinite(tolerance) or tolerance < 0:
            raise ValueError(f"NumericAnswer: tolerance must be a finite number >= 0, got {tolerance!r}.")
        self.field, self.tolerance = field, float(tolerance)

    def __call__(self, prompt: str, completion: str, sample: Mapping[str, Any]) -> float:
        value = _reference(sample, self.field, "NumericAnswer")
        reference = final_number(value)
        if reference is None:
            shown = value if len(value) <= 60 else value[:57] + "..."
            raise ValueError(
                f"NumericAnswer: the sample's {self.field!r} ({shown!r}) holds no number; set field to the "
                "numeric answer's field, or use ExactMatch for text answers"
            )
        answer = final_number(completion)
        return float(answer is not None and abs(answer - reference) <= self.tolerance)


class LengthPenalty:
    """``-coef * max(0, len(completion) - max_chars) / max_chars``: 0 up to `max_chars` characters,
    then minus `coef` for every further `max_chars`. Characters, not tokens: a reward sees text.

    Args:
        max_chars: the length allowed without penalty (> 0).
        coef: the penalty per `max_chars` over it (>= 0).
    """

    def __init__(self, max_chars: int, coef: float = 1.0) -> None:
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"LengthPenalty: max_chars must be an int >= 1, got {max_chars!r}.")
        if (
            isinstance(coef, bool)
            or not isinstance(coef, (int, float))
            or not math.isfinite(coef)
            or coef < 0
        ):
            raise ValueError(f"LengthPenalty: coef must be a finite number >= 0, got {coef!r}.")
        self.max_chars, self.coef = max_chars, float(coef)

    def __call__(self, prompt: str, completion: str, sample: Mapping[str, Any]) -> float:
        return -self.coef * max(0, len(completion) - self.max_chars) / self.max_chars


# The reward classes above: plain Python, built from the config before torch (reward_set.builtin_reward_problems).
BUILTINS = ("ExactMatch", "RegexMatch", "NumericAnswer", "LengthPenalty")
