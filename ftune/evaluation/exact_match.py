"""Exact-match accuracy: greedy-generate an answer to each prompt and compare it with a reference."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch import nn

from ftune.data.messages import Message
from ftune.generation import generate_batch

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer


def normalize_whitespace(text: str) -> str:
    """Strip the ends and collapse every run of whitespace to one space."""
    return " ".join(text.split())


@dataclass
class ExactMatchResult:
    """Counts and the decoded predictions, in the order of the samples."""

    num_correct: int = 0
    num_total: int = 0
    predictions: list[str] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        """num_correct / num_total (0.0 when there were no samples)."""
        return self.num_correct / self.num_total if self.num_total else 0.0


def prompt_tokens(tokenizer: Tokenizer, messages: Sequence[Message]) -> list[int]:
    """The tokens of a conversation followed by the opening of the assistant's reply.

    Raises:
        ValueError: the tokenizer cannot add a generation prompt.
    """
    if "add_generation_prompt" not in inspect.signature(tokenizer.tokenize_messages).parameters:
        raise ValueError(
            f"{type(tokenizer).__name__}.tokenize_messages has no add_generation_prompt argument, so the "
            "prompt cannot end where the assistant's answer begins; use an ftune.tokenizers tokenizer."
        )
    tokens, _ = tokenizer.tokenize_messages(list(messages), add_eos=False, add_generation_prompt=True)
    return tokens


def exact_match(
    model: nn.Module,
    tokenizer: Tokenizer,
    samples: Iterable[tuple[Sequence[Message], str]],
    *,
    max_new_tokens: int = 64,
    batch_size: int = 8,
    normalize: Callable[[str], str] | None = normalize_whitespace,
) -> ExactMatchResult:
    """Greedy-decode an answer to each prompt and count those equal to their reference.

    Args:
        model: an ftune decoder.
        tokenizer: builds the prompts (`tokenize_messages(..., add_generation_prompt=True)`) and
            decodes the answers; its `stop_tokens` end an answer.
        samples: (prompt messages, reference answer) pairs; the messages end before the
            assistant's turn (usually system + user).
        max_new_tokens: the longest answer generated.
        batch_size: prompts generated together.
        normalize: applied to both prediction and reference before comparing; None compares
            the raw strings. Defaults to `normalize_whitespace`.

    Returns:
        Counts, accuracy, and the decoded predictions.
    """
    return score_batches(
        model, tokenizer, _text_batches(tokenizer, samples, batch_size), max_new_tokens, normalize
    )


def _text_batches(
    tokenizer: Tokenizer, samples: Iterable[tuple[Sequence[Message], str]], batch_size: int
) -> Iterator[tuple[list[tuple[list[int], str]], None]]:
    """The samples as batches of (prompt ids, reference), without images."""
    batch: list[tuple[list[int], str]] = []
    for messages, reference in samples:
        batch.append((prompt_tokens(tokenizer, messages), reference))
        if len(batch) == batch_size:
            yield batch, None
            batch = []
    if batch:
        yield batch, None


def score_batches(
    model: nn.Module,
    tokenizer: Tokenizer,
    batches: Iterable[tuple[list[tuple[list[int], str]], Mapping[str, Any] | None]],
    max_new_tokens: int,
    normalize: Callable[[str], str] | None,
) -> ExactMatchResult:
    """Score every (batch, images) pair with `score_answers`, the model in eval mode meanwhile.

    The model's training mode is restored afterwards, also when a batch raises. `batches` may be
    lazy: it is consumed inside the eval-mode block.
    """
    result = ExactMatchResult()
    stops = set(tokenizer.stop_tokens)
    was_training = model.training
    model.eval()
    try:
        for batch, images in batches:
            score_answers(model, tokenizer, batch, stops, max_new_tokens, normalize, result, images=images)
    finally:
        model.train(was_training)
    return result


def score_answers(
    model: nn.Module,
    tokenizer: Tokenizer,
    batch: list[tuple[list[int], str]],
    stops: set[int],
    max_new_tokens: int,
    normalize: Callable[[str], str] | None,
    result: ExactMatchResult,
    images: Mapping[str, Any] | None = None,
) -> None:
    """Answer a batch of (prompt ids, reference) greedily and add the outcome to `result`; `images` are
    the prompts' ``pixel_values`` and ``image_inputs`` (`ftune.generation.generate_batch`), or None."""
    answers = generate_batch(
        model,
        [prompt for prompt, _ in batch],
        max_new_tokens=max_new_tokens,
        stop_tokens=sorted(stops),
        pad_id=tokenizer.pad_id,
        **(images or {}),
    )
    for answer, (_, reference) in zip(answers, batch):
        if answer and answer[-1] in stops:
            answer = answer[:-1]  # the stop token is not part of the answer
        prediction = tokenizer.decode(answer, skip_special_tokens=True)
        ok = normalize(prediction) == normalize(reference) if normalize else prediction == reference
        result.predictions.append(prediction)
        result.correct.append(ok)
        result.num_correct += int(ok)
        result.num_total += 1
