"""Evaluation metrics: harness-style perplexity (word, byte, bits per byte), exact-match accuracy, and a
trained reward model's scores (a reward of online RL)."""

from ftune.evaluation.exact_match import ExactMatchResult, exact_match, normalize_whitespace, prompt_tokens
from ftune.evaluation.perplexity import (
    PerplexityResult,
    Window,
    count_bytes,
    count_words,
    perplexity,
    rolling_token_logprobs,
    rolling_windows,
)
from ftune.evaluation.reward_model import RewardModel
from ftune.settings import EvalSettings

__all__ = [
    "EvalSettings",
    "ExactMatchResult",
    "PerplexityResult",
    "RewardModel",
    "Window",
    "count_bytes",
    "count_words",
    "exact_match",
    "normalize_whitespace",
    "perplexity",
    "prompt_tokens",
    "rolling_token_logprobs",
    "rolling_windows",
]
