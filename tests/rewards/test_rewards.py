"""ftune.rewards: the built-in rewards on clear cases, their combination, and the refusals."""

import math
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from ftune.config import instantiate
from ftune.rewards import (
    ExactMatch,
    LengthPenalty,
    NumericAnswer,
    RegexMatch,
    RewardError,
    final_number,
    reward_stats,
    score_rewards,
)


def test_exact_match_compares_whitespace_collapsed_text():
    reward = ExactMatch(field="answer")
    assert reward("q", "  2024-01-05\n", {"answer": "2024-01-05"}) == 1.0
    assert reward("q", "2024 -01-05", {"answer": "2024-01-05"}) == 0.0
    assert reward("q", "a  b", {"answer": "a b"}) == 1.0


@pytest.mark.parametrize(
    "text, number",
    [
        ("so she has 18 eggs\n#### 18", 18.0),
        ("#### 1,234", 1234.0),
        ("it is -3 then 7.5", 7.5),
        ("first 12 then #### -4 apples", -4.0),
        ("#### 42 because 3 times 14", 14.0),  # the last number after the last ####
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
    with pytest.raises(ValueError, match="holds no number; use ExactMatch"):
        reward("q", "72", {"answer": "seventy-two"})


def test_regex_match_searches_and_anchors_when_asked():
    assert RegexMatch(r"####\s*\d+")("q", "work\n#### 12", {}) == 1.0
    assert RegexMatch(r"^<answer>.*</answer>$")("q", "<answer>\n5\n</answer>", {}) == 1.0
    assert RegexMatch(r"^<answer>.*</answer>$")("q", "so <answer>5</answer>", {}) == 0.0
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


def test_built_ins_are_components():
    node = OmegaConf.create(
        {
            "correct": {"_component_": "ftune.rewards.NumericAnswer", "field": "answer"},
            "format": {"_component_": "ftune.rewards.RegexMatch", "pattern": "####"},
        }
    )
    rewards = {name: instantiate(node[name]) for name in node}
    assert rewards["correct"]("q", "#### 3", {"answer": "3"}) == 1.0
    assert rewards["format"]("q", "#### 3", {}) == 1.0


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


def test_a_failing_reward_is_named_with_its_sample():
    def broken(prompt, completion, sample):
        return float("nan") if completion == "nan" else None

    with pytest.raises(
        RewardError, match=r"reward 'mine' on prompt 'p' and completion 'nan' returned nan \(float\)"
    ):
        score_rewards({"mine": broken}, {"mine": 1.0}, ["p"], ["nan"], [{}])
    with pytest.raises(
        RewardError, match=r"returned None \(NoneType\); a reward must return a finite number"
    ):
        score_rewards({"mine": broken}, {"mine": 1.0}, ["p"], ["x"], [{}])
    with pytest.raises(
        RewardError, match=r"reward 'ok' .* raised KeyError: ExactMatch reads the sample's field 'answer'"
    ):
        score_rewards({"ok": ExactMatch("answer")}, {"ok": 1.0}, ["p"], ["x"], [{"label": "y"}])
    assert RewardError.user_facing  # printed as one line by the CLI


def test_weights_must_match_the_rewards_and_be_finite():
    rewards = {"a": RegexMatch("x")}
    with pytest.raises(ValueError, match=r"reward_weights: names \['b'\] must be the rewards' names \['a'\]"):
        score_rewards(rewards, {"b": 1.0}, [], [], [])
    with pytest.raises(ValueError, match=r"reward_weights: \{'a': inf\} are not finite numbers"):
        score_rewards(rewards, {"a": math.inf}, [], [], [])
    total, _ = score_rewards(rewards, {"a": -2.0}, ["p"], ["x"], [{}])  # a penalty: allowed
    assert total == [-2.0]


def test_reward_stats_report_means_stds_and_groups_without_signal():
    per = {"correct": [1.0, 0.0, 1.0, 1.0]}
    stats = reward_stats(per, [1.0, 0.0, 1.0, 1.0], group_size=2)
    assert stats["rewards/correct/mean"] == 0.75
    assert stats["reward/std"] == pytest.approx(math.sqrt(0.1875))
    assert stats["reward/zero_std_groups"] == 0.5  # the second prompt's two completions tie
    with pytest.raises(ValueError, match="group_size must be an int >= 1 dividing the 4 completions, got 3"):
        reward_stats(per, [1.0] * 4, group_size=3)


def test_rewards_import_no_torch():
    code = "import sys, ftune.rewards; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
