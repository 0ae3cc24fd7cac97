"""Perplexity of texts with rolling windows: word perplexity, byte perplexity, bits per byte.

Follows lm-evaluation-harness's `loglikelihood_rolling` and its wikitext task, so numbers are
comparable with published ones:

- A document is encoded without BOS/EOS and scored after a one-token prefix (BOS, or EOS when
  the tokenizer has no BOS), so its first token is predicted too.
- Windows are disjoint in what they *predict* and together predict every token exactly once.
  Each window feeds at most `max_seq_len` tokens; the first predicts up to `max_seq_len`
  tokens, each later one up to `stride` new tokens, preceded by as much earlier text as fits.
  `stride == max_seq_len` (the default) is the harness's setting.
- Per document, words = len(re.split(r"\\s+", text)) and bytes = len(text.encode("utf-8")),
  counted on the original text. Over a corpus, log-likelihoods, words and bytes are summed
  before dividing: word_perplexity = exp(-sum_ll / words), byte_perplexity =
  exp(-sum_ll / bytes), bits_per_byte = -sum_ll / (bytes * ln 2).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer


@dataclass(frozen=True)
class Window:
    """One forward pass over `seq = [prefix] + tokens`.

    The model reads seq[start:end]; input position i predicts tokens[start + i]. Only the
    predictions of tokens[pred_start:end] are scored; the ones before are context.
    """

    start: int
    pred_start: int
    end: int


def rolling_windows(num_tokens: int, *, max_seq_len: int, stride: int | None = None) -> list[Window]:
    """Split `num_tokens` predictions into windows of at most `max_seq_len` inputs.

    Args:
        num_tokens: tokens in the document (without the prefix token).
        max_seq_len: the longest input a window may have.
        stride: new tokens predicted per window after the first; None means max_seq_len. A
            smaller stride gives every prediction more context at the cost of more windows.

    Returns:
        Windows whose [pred_start, end) ranges tile range(num_tokens) in order.

    Raises:
        ValueError: max_seq_len < 1, or stride not in [1, max_seq_len].
    """
    if max_seq_len < 1:
        raise ValueError(f"max_seq_len must be >= 1; got {max_seq_len}.")
    stride = max_seq_len if stride is None else stride
    if not 1 <= stride <= max_seq_len:
        raise ValueError(f"stride must be between 1 and max_seq_len ({max_seq_len}); got {stride}.")
    if num_tokens <= 0:
        return []
    # The first window has no earlier text to lose, so it predicts a full max_seq_len tokens.
    windows = [Window(0, 0, min(max_seq_len, num_tokens))]
    while windows[-1].end < num_tokens:
        pred_start = windows[-1].end
        end = min(pred_start + stride, num_tokens)
        windows.append(Window(max(0, end - max_seq_len), pred_start, end))
    return windows


@torch.no_grad()
def rolling_token_logprobs(
    model: nn.Module,
    tokens: Sequence[int],
    *,
    prefix_token: int,
    max_seq_len: int,
    stride: int | None = None,
    batch_size: int = 8,
) -> torch.Tensor:
    """Log-probability of every token of a document under the model, by rolling windows.

    Args:
        model: an ftune decoder, caches disabled (`model(tokens) -> logits`).
        tokens: the document's ids, without BOS/EOS.
        prefix_token: the id that conditions the first token (BOS, or EOS without BOS).
        max_seq_len: longest window fed to the model.
        stride: see `rolling_windows`.
        batch_size: windows per forward pass (right-padded; causal attention keeps pads inert).

    Returns:
        (len(tokens),) float64: log p(tokens[t] | prefix, tokens[:t] within its window).
    """
    seq = torch.tensor([prefix_token, *tokens], dtype=torch.long)
    targets = torch.tensor(list(tokens), dtype=torch.long)
    out = torch.empty(len(tokens), dtype=torch.float64)
    windows = rolling_windows(len(tokens), max_seq_len=max_seq_len, stride=stride)
    device = next(model.parameters()).device
    for first in range(0, len(windows), batch_size):
        group = windows[first : first + batch_size]
        width = max(w.end - w.start for w in group)
        inputs = torch.full((len(group), width), prefix_token, dtype=torch.long)
        for row, w in enumerate(group):
            inputs[row, : w.end - w.start] = seq[w.start : w.end]
        logprobs = F.log_softmax(model(inputs.to(device)).float(), dim=-1)  # (b, width, vocab)
        for row, w in enumerate(group):
            scored = slice(w.pred_start - w.start, w.end - w.start)
            wanted = targets[w.pred_start : w.end].to(device)[:, None]  # (n, 1)
            out[w.pred_start : w.end] = logprobs[row, scored].gather(-1, wanted)[:, 0].double().cpu()
    return out


def count_words(text: str) -> int:
    """Words as the harness's wikitext task counts them: len(re.split(r"\\s+", text))."""
    return len(re.split(r"\s+", text))


def count_bytes(text: str) -> int:
    """UTF-8 bytes of the text."""
    return len(text.encode("utf-8"))


@dataclass
class PerplexityResult:
    """Sums over documents; the metrics divide the summed log-likelihood by summed counts."""

    loglikelihood: float = 0.0
    num_tokens: int = 0
    num_words: int = 0
    num_bytes: int = 0
    num_documents: int = 0

    @property
    def word_perplexity(self) -> float:
        """exp(-loglikelihood / words)."""
        return math.exp(-self.loglikelihood / self.num_words)

    @property
    def byte_perplexity(self) -> float:
        """exp(-loglikelihood / bytes)."""
        return math.exp(-self.loglikelihood / self.num_bytes)

    @property
    def bits_per_byte(self) -> float:
        """-loglikelihood / (bytes * ln 2)."""
        return -self.loglikelihood / (self.num_bytes * math.log(2))

    @property
    def token_perplexity(self) -> float:
        """exp(-loglikelihood / tokens): depends on the tokenizer, so compare only within one."""
        return math.exp(-self.loglikelihood / self.num_tokens)

    def as_dict(self) -> dict[str, float]:
        """The metrics and the sums, for metric loggers."""
        return {
            "word_perplexity": self.word_perplexity,
            "byte_perplexity": self.byte_perplexity,
            "bits_per_byte": self.bits_per_byte,
            "token_perplexity": self.token_perplexity,
            "loglikelihood": self.loglikelihood,
            "num_tokens": self.num_tokens,
            "num_words": self.num_words,
            "num_bytes": self.num_bytes,
            "num_documents": self.num_documents,
        }


def perplexity(
    model: nn.Module,
    tokenizer: Tokenizer,
    texts: Iterable[str],
    *,
    max_seq_len: int | None = None,
    stride: int | None = None,
    batch_size: int = 8,
) -> PerplexityResult:
    """Word/byte perplexity and bits per byte of `texts`, harness-style (see the module docstring).

    Args:
        model: an ftune decoder, caches disabled.
        tokenizer: encodes each text (without BOS/EOS); its BOS (else EOS) is the prefix token.
        texts: the documents.
        max_seq_len: window length; None uses the model's `max_seq_len`.
        stride: see `rolling_windows`.
        batch_size: windows per forward pass.

    Returns:
        The summed log-likelihood and counts; read the metrics off its properties.

    Raises:
        ValueError: no max_seq_len given and the model has none, or no text with any token.
    """
    if max_seq_len is None:
        max_seq_len = getattr(model, "max_seq_len", None)
        if not isinstance(max_seq_len, int):
            raise ValueError(
                f"perplexity: {type(model).__name__} has no max_seq_len attribute; pass max_seq_len=<window length>."
            )
    prefix = tokenizer.bos_id if tokenizer.bos_id is not None else tokenizer.eos_id
    result = PerplexityResult()
    was_training = model.training
    model.eval()
    try:
        for text in texts:
            tokens = tokenizer.encode(text, add_bos=False, add_eos=False)
            logprobs = rolling_token_logprobs(
                model,
                tokens,
                prefix_token=prefix,
                max_seq_len=max_seq_len,
                stride=stride,
                batch_size=batch_size,
            )
            result.loglikelihood += float(logprobs.sum())
            result.num_tokens += len(tokens)
            result.num_words += count_words(text)
            result.num_bytes += count_bytes(text)
            result.num_documents += 1
    finally:
        model.train(was_training)
    if result.num_tokens == 0:
        raise ValueError(
            f"perplexity: the {result.num_documents} text(s) given encode to no tokens; pass non-empty documents."
        )
    return result
