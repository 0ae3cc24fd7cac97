"""Next-token choice from logits: greedy, temperature, top-k and top-p (nucleus) sampling."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def check_sampling_args(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Raise ValueError unless temperature >= 0, top_k is None or >= 1, top_p is None or in (0, 1]."""
    if not temperature >= 0.0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy decoding); got {temperature!r}.")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive int or None (no top-k filtering); got {top_k!r}.")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] or None (no nucleus filtering); got {top_p!r}.")


def sample(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
) -> torch.Tensor:
    """Pick one token id per row of `logits`.

    Args:
        logits: (..., vocab) unnormalized scores.
        temperature: divides the logits before softmax; 0 picks the argmax (greedy) and ignores
            top_k/top_p.
        top_k: keep only the k highest-scoring tokens (ties at the k-th score are kept).
        top_p: keep the smallest set of most likely tokens whose probability reaches top_p
            (always at least the most likely token).
        generator: random source, for reproducible sampling; None uses torch's global RNG. A list
            of generators, one per row of a 2-D `logits`, draws each row from its own: a row's
            token then depends on its logits and its generator only, not on the other rows of
            the batch (online RL uses this to sample the same completions at any world size).

    Returns:
        (...) long tensor of token ids.

    Raises:
        ValueError: temperature < 0, top_k < 1 or top_p outside (0, 1].
    """
    check_sampling_args(temperature, top_k, top_p)
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        # Drop a token when the tokens ranked above it already hold top_p of the mass; the first
        # token has nothing above it, so it always survives.
        mass_above = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = mass_above >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(dim=-1)
    # argmax(p / E) with E ~ Exp(1) i.i.d. draws token i with probability p_i (the "exponential
    # race"); unlike torch.multinomial it needs no host sync and takes a generator on any device.
    # The clamp keeps a (rare) exact-zero draw from turning a zero-probability token into 0/0 = NaN.
    if isinstance(generator, (list, tuple)):
        if probs.dim() != 2 or len(generator) != probs.shape[0]:
            raise ValueError(
                f"sample: {len(generator)} generators for logits of shape {list(probs.shape)}; give one "
                "generator per row of 2-D logits, or a single generator."
            )
        race = torch.stack(
            [torch.empty_like(row).exponential_(1.0, generator=g) for row, g in zip(probs, generator)]
        )
    else:
        race = torch.empty_like(probs).exponential_(1.0, generator=generator)
    race = race.clamp_(min=torch.finfo(probs.dtype).tiny)
    return (probs / race).argmax(dim=-1)
