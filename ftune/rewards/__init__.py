"""Rewards for online RL (GRPO): components that score a completion, and how several are combined.

A reward is a callable ``(prompt, completion, sample) -> float``, where ``sample`` is the dataset
record the prompt came from (its reference fields: an answer, a label). The built-ins are classes
configured as components, so a config lists them like any other::

    rewards:
      _component_: ftune.rewards.RewardSet
      rewards:
        correct: {_component_: ftune.rewards.NumericAnswer, field: answer}
        format: {_component_: ftune.rewards.RegexMatch, pattern: "####"}
      weights: {correct: 1.0, format: 0.2}

A reward of your own that is a plain function is given with ``_partial_: true`` (so building the
config returns the function instead of calling it): ``{_component_: my_rewards.has_json, _partial_:
true}``; its package must be trusted like any component's (``ftune.config.trust``).

:func:`check_rewards` checks the names and weights when the RewardSet is built; :func:`score_rewards`
calls each reward on each sample and refuses a reward that raises or returns
something that is not a finite number, naming the reward, the sample and the value. Nothing here
imports torch.
"""

from ftune.rewards.builtins import ExactMatch, LengthPenalty, NumericAnswer, RegexMatch, final_number
from ftune.rewards.checkers import MathVerify, ReasoningGymScore
from ftune.rewards.reward_set import RewardSet
from ftune.rewards.scoring import RewardError, check_rewards, reward_stats, score_rewards

__all__ = [
    "ExactMatch",
    "LengthPenalty",
    "MathVerify",
    "NumericAnswer",
    "ReasoningGymScore",
    "RegexMatch",
    "RewardError",
    "RewardSet",
    "check_rewards",
    "final_number",
    "reward_stats",
    "score_rewards",
]
