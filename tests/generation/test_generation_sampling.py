"""sample(): greedy, temperature, top-k and top-p, checked on hand-made distributions."""

import pytest
import torch

from ftune.generation import sample


def test_temperature_zero_is_argmax() -> None:
    logits = torch.randn(5, 11, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sample(logits, temperature=0.0), logits.argmax(-1))


def test_top_k_one_is_argmax_whatever_the_temperature() -> None:
    logits = torch.randn(64, 11, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    assert torch.equal(sample(logits, temperature=5.0, top_k=1, generator=g), logits.argmax(-1))


def test_sampling_follows_the_softmax_distribution() -> None:
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().expand(40_000, -1)
    draws = sample(logits, temperature=1.0, generator=torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=4).float() / len(draws)
    torch.testing.assert_close(freq, probs, atol=0.01, rtol=0)


def test_top_k_and_top_p_restrict_the_support() -> None:
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().expand(20_000, -1)
    g = torch.Generator().manual_seed(0)
    assert set(sample(logits, top_k=2, generator=g).tolist()) == {0, 1}
    # top_p=0.5: the first token alone holds 0.5, so nothing else survives.
    assert set(sample(logits, top_p=0.5, generator=g).tolist()) == {0}
    # top_p=0.75: token 1 (0.5 above it) is needed to reach 0.75, token 2 (0.8 above it) is not.
    assert set(sample(logits, top_p=0.75, generator=g).tolist()) == {0, 1}
    assert set(sample(logits, top_p=0.85, generator=g).tolist()) == {0, 1, 2}
    # Renormalised within the nucleus: 0.5 / 0.8 and 0.3 / 0.8.
    draws = sample(logits, top_p=0.75, generator=torch.Generator().manual_seed(1))
    assert abs((draws == 0).float().mean().item() - 0.625) < 0.015


def test_seeded_generator_is_reproducible() -> None:
    logits = torch.randn(32, 50, generator=torch.Generator().manual_seed(0))
    a = sample(logits, temperature=1.3, top_p=0.9, generator=torch.Generator().manual_seed(7))
    b = sample(logits, temperature=1.3, top_p=0.9, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": -0.1}, r"temperature must be >= 0 \(0 means greedy decoding\); got -0.1"),
        ({"top_k": 0}, r"top_k must be a positive int or None .*; got 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\] or None .*; got 0.0"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\] or None .*; got 1.5"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sample(torch.zeros(1, 4), **kwargs)
