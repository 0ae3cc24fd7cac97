"""PPO's view of sampled responses: where each one ends, which tokens count, and which are penalised.

A PPO rollout samples ``max_generated_tokens`` tokens after each prompt. As torchtune 0.6.1's
``ppo_full_finetune_single_device`` reads them (``torchtune.rlhf``):

- a response ends at its first stop token (kept); every token after it is padding
  (:func:`truncate_at_first_stop`);
- its *last index* is the position of its last real token (torchtune's ``seq_lens``, which is a length
  minus one): the reward model's score is read there (:func:`last_index`);
- the score and the last value live one position further, on the first padding token, when there is one
  and the response is neither empty nor one token short of the maximum (:func:`score_index`); torchtune
  does this so that the score lands on a position whose KL term is 0 (both log-probabilities are masked
  to 1 there), and ftune keeps it so that its advantages equal torchtune's;
- a response with no stop token, or whose last index is below ``min_response_length``, has its score
  replaced by ``reward_penalty`` (:func:`penalised`).

Shapes: ``b`` responses, ``t`` = max_generated_tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def truncate_at_first_stop(
    responses: torch.Tensor, stop_ids: Sequence[int] | torch.Tensor, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The responses cut after their first stop token, and where they were cut.

    Args:
        responses: ``[b, t]`` sampled token ids (not modified).
        stop_ids: the ids that end a response (the tokenizer's stop tokens).
        pad_id: what replaces each token after the first stop token.

    Returns:
        ``(padding, truncated)``: ``padding [b, t]`` bool, True after each row's first stop token;
        ``truncated [b, t]``, the responses with those positions set to ``pad_id``.
    """
    stops = torch.as_tensor(stop_ids, dtype=responses.dtype, device=responses.device)
    is_stop = torch.isin(responses, stops)  # (b, t)
    seen = torch.cumsum(is_stop, dim=1)  # (b, t) stop tokens up to and including each position
    padding = (seen > 1) | ((seen == 1) & ~is_stop)
    return padding, responses.masked_fill(padding, pad_id)


def last_index(padding: torch.Tensor) -> torch.Tensor:
    """``[b]`` long: each row's last position that is not padding (0 for a row that is all padding).

    Args:
        padding: ``[b, t]`` bool, True at padding (:func:`truncate_at_first_stop`'s).
    """
    real = (~padding).cumsum(dim=-1)  # (b, t)
    return real.argmax(dim=-1).clamp(0, padding.shape[1] - 1)


def score_index(last: torch.Tensor, max_generated_tokens: int) -> torch.Tensor:
    """``[b]`` long: where each response's score is added and its last value kept (see the module docstring).

    Args:
        last: ``[b]``, :func:`last_index`'s.
        max_generated_tokens: the responses' width ``t``.
    """
    moved = (last > 0) & (last < max_generated_tokens - 1)
    return torch.where(moved, last + 1, last)


def value_padding(padding: torch.Tensor, score_at: torch.Tensor) -> torch.Tensor:
    """``[b, t]`` bool: the response padding with each row's :func:`score_index` position unmasked (the
    value at the score's position takes part in the value loss)."""
    return padding.scatter(1, score_at.unsqueeze(-1), False)


def penalised(
    padding: torch.Tensor,
    last: torch.Tensor,
    *,
    penalise_no_eos: bool,
    min_response_length: int | None,
) -> torch.Tensor:
    """``[b]`` bool: the responses whose score becomes the reward penalty.

    Args:
        padding: ``[b, t]`` (:func:`truncate_at_first_stop`'s): a row with no padding never stopped.
        last: ``[b]`` (:func:`last_index`'s).
        penalise_no_eos: penalise the responses that did not stop.
        min_response_length: penalise those whose last index is below it (torchtune compares its
            ``seq_lens``, the last index, so a response of exactly ``min_response_length`` tokens passes);
            None: no length penalty.
    """
    out = torch.zeros_like(last, dtype=torch.bool)
    if penalise_no_eos:
        out = ~padding.any(-1)
    if min_response_length is not None:
        out = out | (last < min_response_length)
    return out
