"""Rewards are bounded: a reward stuck on a completion is stopped, and a null reference answer is refused."""

from __future__ import annotations

import re

import pytest

from ftune.rewards import ExactMatch, NumericAnswer, RegexMatch, RewardError, RewardSet


def test_a_backtracking_regex_reward_ends_with_an_error_naming_the_reward_and_the_completion():
    rewards = RewardSet({"format": RegexMatch(r"^(a+)+$")}, {"format": 1.0}, time_limit_s=0.3)
    with pytest.raises(
        RewardError,
        match=r"reward 'format' on completion 2 of 2 \(prompt 'q', completion 'a{40}b'\) ran longer than "
        r"rewards.time_limit_s=0.3 s and was stopped.*Fix the reward, or raise rewards.time_limit_s \(null: no limit\)",
    ):
        rewards(["q", "q"], ["aaa", "a" * 40 + "b"], [{}, {}])


def test_a_plain_function_reward_that_loops_is_stopped_too():
    def loops(prompt, completion, sample):
        while True:
            re.match(r"(x+)+y", "x" * 30)

    rewards = RewardSet({"loops": loops}, {"loops": 1.0}, time_limit_s=0.2)
    with pytest.raises(RewardError, match=r"reward 'loops' on completion 1 of 1 .* ran longer than"):
        rewards(["p"], ["c"], [{}])


def test_the_limit_is_a_checked_argument_and_null_turns_it_off():
    with pytest.raises(
        ValueError,
        match=r"rewards.time_limit_s: must be a finite number of seconds > 0, or null for no limit; got 0",
    ):
        RewardSet({"c": ExactMatch("answer")}, {"c": 1.0}, time_limit_s=0)
    assert RewardSet({"c": ExactMatch("answer")}, {"c": 1.0}).time_limit_s == 10.0
    unbounded = RewardSet({"c": ExactMatch("answer")}, {"c": 1.0}, time_limit_s=None)
    assert unbounded(["p"], ["42"], [{"answer": 42}])[0] == [1.0]


@pytest.mark.parametrize("reward", [ExactMatch("answer"), NumericAnswer("answer")], ids=["exact", "numeric"])
@pytest.mark.parametrize(
    "value, shown", [(None, "null"), ([1, 2], r"a list \(\[1, 2\]\)"), (True, r"a bool \(True\)")]
)
def test_a_reference_that_is_not_a_string_or_a_number_is_refused(reward, value, shown):
    rewards = RewardSet({"correct": reward}, {"correct": 1.0})
    with pytest.raises(
        RewardError,
        match=rf"reward 'correct' on completion 1 of 1 .* raised ValueError: {type(reward).__name__}: the sample's "
        rf"'answer' is {shown}, not a reference answer \(a string or a number\); write the answer in the data",
    ):
        rewards(["p"], ["None"], [{"answer": value}])
