"""ftune.rewards: the built-in rewards on clear cases, their combination, and the refusals."""

import math
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from ftune.config import instantiate
from ftune.config.errors import ConfigError
from ftune.rewards import (
    ExactMatch,
    LengthPenalty,
    NumericAnswer,
    RegexMatch,
    RewardError,
    check_rewards,
    final_number,
    reward_stats,
    score_rewards,
)


def test_exact_match_compares_whitespace_collapsed_text():
    reward = ExactMatch(field="answer")
    assert reward("q", "  2024-01-05\n", {"answer": "2024-01-05"}) == 1.0
    assert reward("q", "2024 -01-05", {"answer": "2024-01-05"}) == 0.0
    assert reward("q", "a \n\t b", {"answer": "a b"}) == 1.0
    assert reward("q", "A b", {"answer": "a b"}) == 0.0
    assert reward("q", "7", {"answer": 7}) == 1.0  # a non-text reference is compared as text


def test_exact_match_options():
    strict = ExactMatch(field="answer", normalize_whitespace=False)
    assert strict("q", "a b", {"answer": "a b"}) == 1.0
    assert strict("q", "a b\n", {"answer": "a b"}) == 0.0
    assert strict("q", "a  b", {"answer": "a b"}) == 0.0
    assert ExactMatch(field="answer", ignore_case=True)("q", " Paris ", {"answer": "PARIS"}) == 1.0
    with pytest.raises(ValueError, match=r"ExactMatch: field must be the name of the sample field .* got ''"):
        ExactMatch(field="")
    with pytest.raises(ValueError, match="ExactMatch: normalize_whitespace must be true or false, got 'yes'"):
        ExactMatch(field="a", normalize_whitespace="yes")


@pytest.mark.parametrize(
    "text, number",
    [
        ("so she has 18 eggs\n#### 18", 18.0),
        ("#### 1,234", 1234.0),
        ("The total is $1,234,567.", 1234567.0),
        ("it is -3 then 7.5", 7.5),
        ("it is 42.0", 42.0),
        ("first 12 then #### -4 apples", -4.0),
        ("#### 42 because 3 times 14", 14.0),  # the last number after the last ####
        ("so x = -4", -4.0),
        ("12-4", 4.0),  # subtraction, not a negative number
        ("(-3)", -3.0),
        ("the digits 1,2,3", 3.0),  # commas not in groups of three separate numbers
        ("answer: 72.", 72.0),
        ("5 apples #### none", None),  # a #### without a number after it is no answer
        ("no number here", None),
    ],
)
def test_final_number_reads_gsm8k_answers(text, number):
    assert final_number(text) == number


def test_numeric_answer_compares_final_numbers():
    reward = NumericAnswer(field="answer")
    sample = {"answer": "Natalia sold 48/2 = 24 clips in May.\n#### 72"}
    assert reward("q", "48 + 24 = 72\n#### 72", sample) == 1.0
    assert reward("q", "The answer is 72.0", sample) == 1.0
    assert reward("q", "#### 71", sample) == 0.0
    assert reward("q", "I do not know", sample) == 0.0
    assert reward("q", "72.0", {"answer": 72}) == 1.0
    assert reward("q", "#### -1,234", {"answer": "-1234"}) == 1.0
    assert reward("q", "#### 1,234", {"answer": "1234.5"}) == 0.0
    assert NumericAnswer(field="answer", tolerance=0.5)("q", "#### 1,234", {"answer": "1234.5"}) == 1.0
    with pytest.raises(ValueError, match=r"the sample's 'answer' \('seventy-two'\) holds no number"):
        reward("q", "72", {"answer": "seventy-two"})
    with pytest.raises(ValueError, match="tolerance must be a finite number >= 0, got -1"):
        NumericAnswer(field="answer", tolerance=-1)


def test_regex_match_searches_and_anchors_when_asked():
    assert RegexMatch(r"####\s*\d+")("q", "work\n#### 12", {}) == 1.0
    assert RegexMatch(r"####")("q", "no marker", {}) == 0.0
    assert RegexMatch(r"^<answer>.*</answer>$")("q", "<answer>\n5\n</answer>", {}) == 1.0
    assert RegexMatch(r"^<answer>.*</answer>$")("q", "so <answer>5</answer>", {}) == 0.0
    assert RegexMatch(r"^<answer>.*</answer>$")("q", "<answer>5</answer> and more", {}) == 0.0
    with pytest.raises(ValueError, match=r"RegexMatch: pattern '\(' is not a valid regular expression"):
        RegexMatch("(")


def test_length_penalty_counts_characters_past_the_limit():
    reward = LengthPenalty(max_chars=10, coef=0.5)
    assert reward("q", "x" * 10, {}) == 0.0
    assert reward("q", "x" * 30, {}) == pytest.approx(-1.0)  # 20 over = 2 limits x 0.5
    with pytest.raises(ValueError, match="max_chars must be an int >= 1, got 0"):
        LengthPenalty(max_chars=0)
    with pytest.raises(ValueError, match="coef must be a finite number >= 0, got -1"):
        LengthPenalty(max_chars=5, coef=-1)


@pytest.mark.parametrize(
    "node, completion, sample, value",
    [
        (
            {"_component_": "ftune.rewards.ExactMatch", "field": "answer", "ignore_case": True},
            "A",
            {"answer": "a"},
            1,
        ),
        ({"_component_": "ftune.rewards.RegexMatch", "pattern": "^####"}, "#### 3", {}, 1.0),
        ({"_component_": "ftune.rewards.NumericAnswer", "field": "answer"}, "#### 3", {"answer": "3"}, 1.0),
        ({"_component_": "ftune.rewards.LengthPenalty", "max_chars": 2, "coef": 0.5}, "abcd", {}, -0.5),
    ],
)
def test_built_ins_are_components(node, completion, sample, value):
    reward = instantiate(OmegaConf.create({"rewards": {"r": node}}).rewards.r)
    assert reward("q", completion, sample) == value


def test_a_wrong_argument_is_reported_at_config_time():
    node = OmegaConf.create({"_component_": "ftune.rewards.ExactMatch", "fields": "answer"})
    with pytest.raises(ConfigError, match=r"ftune.rewards.ExactMatch\(fields\) does not fit its signature"):
        instantiate(node)


def test_score_rewards_weights_each_reward():
    rewards = {"correct": ExactMatch("answer"), "short": LengthPenalty(max_chars=2, coef=1.0)}
    total, per = score_rewards(
        rewards,
        {"correct": 1.0, "short": 0.5},
        ["p", "p"],
        ["ab", "abcd"],
        [{"answer": "ab"}, {"answer": "ab"}],
    )
    assert per == {"correct": [1.0, 0.0], "short": [0.0, -1.0]}
    assert total == [1.0, -0.5]


def _broken(prompt, completion, sample):
    return {"ok": 0.0, "nan": math.nan, "inf": -math.inf, "text": "1.0", "flag": True}.get(completion)


def _score(completion):
    score_rewards({"mine": _broken}, {"mine": 1.0}, ["p", "p"], ["ok", completion], [{}, {}])


@pytest.mark.parametrize(
    "completion, shown",
    [
        ("nan", r"nan \(float\)"),
        ("inf", r"-inf \(float\)"),
        ("text", r"'1.0' \(str\)"),
        ("flag", r"True \(bool\)"),
        ("none", r"None \(NoneType\)"),
    ],
)
def test_a_reward_returning_a_non_number_is_named_with_its_sample(completion, shown):
    with pytest.raises(
        RewardError,
        match=rf"^reward 'mine' on completion 2 of 2 \(prompt 'p', completion '{completion}'\) returned "
        rf"{shown}; a reward must return a finite number \(int or float\)\. Fix the reward\.$",
    ):
        _score(completion)


def test_a_reward_that_raises_is_named_with_its_sample():
    with pytest.raises(
        RewardError,
        match=r"^reward 'mine' on completion 2 of 2 .* raised KeyError: ExactMatch reads the sample's field "
        r"'answer', which this sample does not have \(its fields: \['label'\]\)",
    ):
        score_rewards(
            {"mine": ExactMatch("answer")},
            {"mine": 1},
            ["p", "p"],
            ["x", "y"],
            [{"answer": "x"}, {"label": "y"}],
        )
    long = "word " * 100
    with pytest.raises(RewardError) as info:
        score_rewards({"mine": lambda p, c, s: 1 / 0}, {"mine": 1.0}, [long], [long + "\nend"], [{}])
    message = str(info.value)
    assert "raised ZeroDivisionError: division by zero" in message and "\n" not in message
    assert len(message) < 400  # prompt and completion are shortened
    assert RewardError.user_facing and issubclass(RewardError, ValueError)  # one line from the CLI


def test_numbers_of_other_types_are_accepted():
    class Real(float):  # e.g. numpy.float32, which registers as a numbers.Real
        pass

    total, per = score_rewards({"a": lambda p, c, s: Real(0.5)}, {"a": 2}, ["p"], ["c"], [{}])
    assert total == [1.0] and per == {"a": [0.5]}


def test_weights_must_match_the_rewards_and_be_finite():
    rewards = {"a": RegexMatch("x")}
    with pytest.raises(
        ValueError,
        match=r"rewards.weights: give one weight per reward, named as in rewards \['a'\]; missing: \['a'\], "
        r"not a reward: \['b'\]",
    ):
        score_rewards(rewards, {"b": 1.0}, [], [], [])
    with pytest.raises(ValueError, match=r"rewards.weights: \{'a': inf\} are not finite numbers"):
        check_rewards(rewards, {"a": math.inf})
    with pytest.raises(ValueError, match=r"rewards.weights: \{'a': '1'\} are not finite numbers"):
        check_rewards(rewards, {"a": "1"})
    with pytest.raises(ValueError, match=r"rewards.weights: all zero \(\{'a': 0.0\}\)"):
        check_rewards(rewards, {"a": 0.0})
    total, _ = score_rewards(rewards, {"a": -2.0}, ["p"], ["x"], [{}])  # a penalty: allowed
    assert total == [-2.0]


def test_reward_names_and_callables_are_checked():
    with pytest.raises(ValueError, match="rewards: none given; name at least one"):
        check_rewards({}, {})
    with pytest.raises(
        ValueError,
        match=r"rewards.rewards.a/b: the name must be letters, digits.* rewards.rewards.c: str 'x' is not callable",
    ):
        check_rewards({"a/b": RegexMatch("x"), "c": "x"}, {"a/b": 1.0, "c": 1.0})
    with pytest.raises(ValueError, match="score_rewards: 1 prompts, 2 completions and 1 samples"):
        score_rewards({"a": RegexMatch("x")}, {"a": 1.0}, ["p"], ["x", "y"], [{}])


def test_reward_stats_report_means_stds_and_groups_without_signal():
    per = {"correct": [1.0, 0.0, 1.0, 1.0]}
    stats = reward_stats(per, [1.0, 0.0, 1.0, 1.0], group_size=2)
    assert stats["rewards/correct/mean"] == 0.75
    assert stats["rewards/correct/std"] == pytest.approx(math.sqrt(0.1875))
    assert stats["reward/mean"] == 0.75
    assert stats["reward/std"] == pytest.approx(math.sqrt(0.1875))
    assert stats["reward/zero_std_groups"] == 0.5  # the second prompt's two completions tie
    assert reward_stats(per, [1.0, 0.0, 1.0, 0.5], group_size=2)["reward/zero_std_groups"] == 0.0
    with pytest.raises(ValueError, match="group_size must be an int >= 1 dividing the 4 completions, got 3"):
        reward_stats(per, [1.0] * 4, group_size=3)


def test_rewards_import_no_torch():
    code = "import sys, ftune.rewards; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"
