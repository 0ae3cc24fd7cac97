"""Batched rewards (a reward model, ``ftune.evaluation.RewardModel``): one ``score_batch`` call a rollout,
weighted with the per-completion rewards, and refused when they give other than one finite number a
completion. Torch-free, as ftune.rewards is."""

import pytest

from ftune.rewards import RewardError, score_rewards


class Batched:
    """A stand-in for a reward model: records its calls, scores each completion by its length."""

    def __init__(self, values=None):
        self.calls, self.values = [], values

    def score_batch(self, prompts, completions, samples):
        self.calls.append(len(completions))
        return self.values if self.values is not None else [float(len(c)) for c in completions]

    def __call__(self, prompt, completion, sample):
        raise AssertionError("a batched reward is called once for all completions")


def test_a_batched_reward_is_called_once_and_weighted_with_the_others():
    model = Batched()
    total, per = score_rewards(
        {"model": model, "exact": lambda p, c, s: float(c == s["answer"])},
        {"model": 0.5, "exact": 2.0},
        ["q"] * 3,
        ["ab", "x", "abcd"],
        [{"answer": "x"}] * 3,
    )
    assert model.calls == [3]
    assert per == {"model": [2.0, 1.0, 4.0], "exact": [0.0, 1.0, 0.0]}
    assert total == [1.0, 2.5, 2.0]


@pytest.mark.parametrize(
    "values, shown",
    [
        ([1.0], "returned \\[1.0\\]; a batched reward returns a list of 2 numbers"),
        ([1.0, float("nan")], "for completion 2 of 2 .* returned nan \\(float\\)"),
        ([1.0, "a"], "for completion 2 of 2 .* returned 'a' \\(str\\)"),
    ],
)
def test_a_batched_reward_giving_other_than_a_number_a_completion_is_named(values, shown):
    with pytest.raises(
        RewardError, match=f"reward 'model' \\(Batched.score_batch of 2 completions\\) {shown}"
    ):
        score_rewards({"model": Batched(values)}, {"model": 1.0}, ["q", "q"], ["a", "b"], [{}, {}])
