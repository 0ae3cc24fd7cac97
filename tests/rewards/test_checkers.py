"""MathVerify: math-verify's parse + verify, run under ftune's time limit (not math-verify's signal.alarm)."""

import signal

import pytest
from math_verify import parse, verify

from ftune.rewards import MathVerify, RewardError, RewardSet

CASES = [
    ("\\frac{1}{2}", "The answer is $\\boxed{0.5}$."),
    ("42", "so 6 * 7 = 42"),
    ("$x^2+2x+1$", "$\\boxed{(x+1)^2}$"),
    ("3", "it is 4"),
    ("\\sqrt{2}", "no number here"),
]


@pytest.mark.parametrize(("gold", "completion"), CASES)
def test_equals_math_verify(gold, completion):
    expected = float(verify(parse(gold), parse(completion)))
    assert MathVerify(field="answer")("q", completion, {"answer": gold}) == expected


def test_scores_by_equivalence_not_text():
    reward = MathVerify(field="answer")
    assert reward("q", "$\\boxed{\\frac{2}{4}}$", {"answer": "0.5"}) == 1.0
    assert reward("q", "$\\boxed{0.6}$", {"answer": "0.5"}) == 0.0


def test_never_sets_its_own_alarm(monkeypatch):
    """math-verify's timeouts use signal.alarm, the timer ftune's reward time limit runs on: they are off."""

    def refuse(*_):
        raise AssertionError("signal.alarm was called")

    monkeypatch.setattr(signal, "alarm", refuse)
    rewards = RewardSet({"math": MathVerify(field="answer")}, {"math": 1.0}, time_limit_s=30.0)
    total, _ = rewards(["q"], ["$\\boxed{\\frac{1}{2}}$"], [{"answer": "0.5"}])
    assert total == [1.0]


def test_a_reference_without_an_answer_is_named():
    rewards = RewardSet({"math": MathVerify(field="answer")}, {"math": 1.0})
    with pytest.raises(
        RewardError, match=r"MathVerify: math-verify finds no answer in the sample's 'answer' \('\?\?\?'\)"
    ):
        rewards(["q"], ["42"], [{"answer": "???"}])


def test_arguments_are_checked():
    with pytest.raises(ValueError, match=r"MathVerify: float_rounding must be an int >= 0, got -1"):
        MathVerify(field="answer", float_rounding=-1)
    with pytest.raises(ValueError, match=r"MathVerify: field must be the name of the sample field"):
        MathVerify(field="")


def test_a_missing_package_names_the_install_command(monkeypatch):
    import sys

    from ftune.rewards import ReasoningGymScore

    monkeypatch.setitem(sys.modules, "math_verify", None)  # import math_verify raises ImportError
    with pytest.raises(
        ImportError, match=r"MathVerify needs the math-verify package.*pip install 'ftune\[agents\]'"
    ):
        MathVerify(field="answer")
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    with pytest.raises(ImportError, match=r"ReasoningGymScore needs the reasoning-gym package"):
        ReasoningGymScore(answer_tag="answer")
