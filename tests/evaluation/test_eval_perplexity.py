"""Rolling-window log-likelihood and harness-style perplexity metrics."""

import math

import pytest
import torch
import torch.nn.functional as F

from ftune.evaluation import (
    PerplexityResult,
    count_bytes,
    count_words,
    perplexity,
    rolling_token_logprobs,
    rolling_windows,
)
from ftune.modules.transformer import TransformerDecoder

PREFIX = 258


def tokens_of(n: int, seed: int = 0) -> list[int]:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize(
    ("n", "max_seq_len", "stride"),
    [
        (1, 4, None),
        (4, 4, None),
        (5, 4, None),
        (37, 8, None),
        (37, 8, 3),
        (37, 8, 1),
        (100, 16, 16),
        (9, 16, 5),
    ],
)
def test_windows_predict_every_token_exactly_once(n: int, max_seq_len: int, stride: int | None) -> None:
    windows = rolling_windows(n, max_seq_len=max_seq_len, stride=stride)
    predicted = [t for w in windows for t in range(w.pred_start, w.end)]
    assert predicted == list(range(n))
    step = max_seq_len if stride is None else stride
    for i, w in enumerate(windows):
        assert 0 <= w.start <= w.pred_start < w.end
        assert w.end - w.start <= max_seq_len  # input length, prefix included
        if i == 0:
            assert (w.start, w.pred_start, w.end) == (0, 0, min(n, max_seq_len))
        else:
            assert w.end - w.pred_start <= step
            # Context: as much earlier text as fits next to the predicted tokens.
            assert w.pred_start - w.start == min(w.pred_start, max_seq_len - (w.end - w.pred_start))


def test_no_tokens_no_windows() -> None:
    assert rolling_windows(0, max_seq_len=8) == []


def full_context_logprobs(model: TransformerDecoder, tokens: list[int]) -> torch.Tensor:
    """Straightforward: one forward over [prefix] + tokens[:-1]; position t predicts tokens[t]."""
    with torch.no_grad():
        logits = model(torch.tensor([[PREFIX, *tokens[:-1]]]))[0]
    return F.log_softmax(logits.float(), dim=-1).gather(-1, torch.tensor(tokens)[:, None])[:, 0].double()


def test_one_window_equals_full_context(model: TransformerDecoder) -> None:
    tokens = tokens_of(40)
    got = rolling_token_logprobs(model, tokens, prefix_token=PREFIX, max_seq_len=64)
    torch.testing.assert_close(got, full_context_logprobs(model, tokens), rtol=0, atol=1e-6)


def test_each_token_is_scored_with_its_window_context(model: TransformerDecoder) -> None:
    tokens = tokens_of(30, seed=1)
    got = rolling_token_logprobs(model, tokens, prefix_token=PREFIX, max_seq_len=8, stride=3, batch_size=4)
    seq = [PREFIX, *tokens]
    for w in rolling_windows(len(tokens), max_seq_len=8, stride=3):
        for t in range(w.pred_start, w.end):
            # Independently: feed exactly the window's inputs up to token t and read the last logit.
            with torch.no_grad():
                logits = model(torch.tensor([seq[w.start : t + 1]]))[0, -1]
            expected = F.log_softmax(logits.float(), dim=-1)[tokens[t]].double()
            torch.testing.assert_close(got[t], expected, rtol=0, atol=1e-5)
    # Less context than the full-context computation, so different numbers for late tokens.
    assert not torch.allclose(got[10:], full_context_logprobs(model, tokens)[10:], atol=1e-4)


def test_batching_windows_does_not_change_the_result(model: TransformerDecoder) -> None:
    tokens = tokens_of(45, seed=2)
    one = rolling_token_logprobs(model, tokens, prefix_token=PREFIX, max_seq_len=16, stride=7, batch_size=1)
    many = rolling_token_logprobs(model, tokens, prefix_token=PREFIX, max_seq_len=16, stride=7, batch_size=5)
    torch.testing.assert_close(one, many, rtol=0, atol=1e-5)


def test_word_and_byte_counts_follow_the_harness() -> None:
    # re.split(r"\s+", doc): runs of whitespace split once, a trailing space adds an empty word.
    assert count_words("Hello  world\nagain") == 3
    assert count_words("Hello  world\nagain ") == 4
    assert count_bytes("héllo") == 6  # é is two UTF-8 bytes


def test_perplexity_metrics_from_summed_loglikelihoods(model: TransformerDecoder, tokenizer) -> None:
    texts = ["The cat sat on the mat.", "Ünïcode  text, twice as odd "]
    result = perplexity(model, tokenizer, texts, max_seq_len=16)
    singles = [perplexity(model, tokenizer, [t], max_seq_len=16) for t in texts]
    expected_ll = 0.0
    for text, single in zip(texts, singles):
        tokens = tokenizer.encode(text, add_bos=False, add_eos=False)
        ll = rolling_token_logprobs(model, tokens, prefix_token=tokenizer.eos_id, max_seq_len=16).sum().item()
        assert single.loglikelihood == pytest.approx(ll, abs=1e-9)
        expected_ll += ll
    assert result.loglikelihood == pytest.approx(expected_ll, abs=1e-9)
    assert result.num_words == 6 + 6 and result.num_documents == 2  # the trailing space adds a word
    assert result.num_bytes == len(texts[0]) + len(texts[1].encode("utf-8")) == result.num_tokens
    assert result.word_perplexity == pytest.approx(math.exp(-expected_ll / 12))
    assert result.byte_perplexity == pytest.approx(math.exp(-expected_ll / result.num_bytes))
    assert result.bits_per_byte == pytest.approx(-expected_ll / (result.num_bytes * math.log(2)))
    assert result.bits_per_byte == pytest.approx(math.log2(result.byte_perplexity))
    # Aggregated as sums, not as a mean of per-document perplexities.
    assert result.word_perplexity != pytest.approx(sum(s.word_perplexity for s in singles) / 2)
    assert set(result.as_dict()) >= {"word_perplexity", "byte_perplexity", "bits_per_byte"}


def test_text_within_one_window_matches_full_context_perplexity(model: TransformerDecoder, tokenizer) -> None:
    text = "short text"
    result = perplexity(model, tokenizer, [text])  # window = the model's max_seq_len (256)
    tokens = tokenizer.encode(text, add_bos=False, add_eos=False)
    assert result.loglikelihood == pytest.approx(full_context_logprobs(model, tokens).sum().item(), abs=1e-5)


def test_a_perfect_model_has_perplexity_one() -> None:
    assert PerplexityResult(0.0, 10, 3, 12, 1).word_perplexity == 1.0
    assert PerplexityResult(0.0, 10, 3, 12, 1).bits_per_byte == 0.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_seq_len": 0}, r"max_seq_len must be >= 1; got 0"),
        ({"max_seq_len": 8, "stride": 9}, r"stride must be between 1 and max_seq_len \(8\); got 9"),
        ({"max_seq_len": 8, "stride": 0}, r"stride must be between 1 and max_seq_len \(8\); got 0"),
    ],
)
def test_bad_window_arguments_raise(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rolling_windows(10, **kwargs)


def test_perplexity_of_nothing_raises(model: TransformerDecoder, tokenizer) -> None:
    with pytest.raises(
        ValueError, match=r"the 1 text\(s\) given encode to no tokens; pass non-empty documents"
    ):
        perplexity(model, tokenizer, [""])


def test_perplexity_needs_a_window_length(tokenizer) -> None:
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"Linear has no max_seq_len attribute; pass max_seq_len="):
        perplexity(model, tokenizer, ["x"])
