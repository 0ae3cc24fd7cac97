"""Exact match on image QA records: chats whose user turns hold image parts, the last turn the reference.

A record is the image chat layout `ftune.datasets.multimodal_chat_dataset` trains on (and the image
task's ``heldout.jsonl`` holds), one JSON object a line::

    {"messages": [{"role": "user", "content": [{"type": "image", "image": "images/0.png"},
                                               {"type": "text", "text": "What colour is the shape?"}]},
                  {"role": "assistant", "content": "red"}]}

The conversation up to the last assistant turn is the prompt, laid out as an image prompt dataset lays
it out (`ftune.datasets.image_prompt_dataset`: relative image paths are read from the file's folder);
that turn's text is the reference. The model answers greedily, a batch of prompts at a time with
their images, and an answer is correct when it equals the reference up to whitespace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from ftune.config.data_files import json_records
from ftune.config.image_checks import check_image_rows
from ftune.datasets.image_generation import image_prompts_batch
from ftune.datasets.image_prompts import ImagePromptDataset, image_prompt_dataset
from ftune.evaluation.exact_match import ExactMatchResult, normalize_whitespace, score_batches

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer


@dataclass(frozen=True)
class ImageSamples:
    """Image QA records read from a file: each prompt record (its turns before the reference), its
    reference, and where it is (``file:line``)."""

    path: Path
    prompts: list[dict[str, Any]]
    references: list[str]
    where: list[str]

    def __len__(self) -> int:
        return len(self.prompts)


def _has_parts(record: Any) -> bool:
    messages = record.get("messages") if isinstance(record, Mapping) else None
    return isinstance(messages, list) and any(
        isinstance(m, Mapping) and isinstance(m.get("content"), list) for m in messages
    )


def _reference(message: Any, where: str) -> str:
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(message, Mapping) and message.get("role") == "assistant":
        if isinstance(content, str):
            return content
        if isinstance(content, list) and all(
            isinstance(p, Mapping) and p.get("type") == "text" for p in content
        ):
            return "".join(str(p.get("text", "")) for p in content)
    raise ValueError(
        f"{where}: the last message is {str(message)[:100]!r}; an image QA record ends with the reference answer, "
        '{"role": "assistant", "content": "<text>"} (or text parts), after the turns of the prompt.'
    )


def read_image_samples(path: str | Path, *, limit: int | None = None) -> ImageSamples | None:
    """Read image QA records and every image they name (before any model loads), or None when the file's
    records hold no image parts (then they are text chat records: `read_chat_samples`).

    Args:
        path: a JSONL (or JSON list) file of image chat records.
        limit: read at most this many records (None: all).

    Raises:
        ValueError: a record that does not end with an assistant reference (file:line named).
        ImageReadError: an image that cannot be read (file, line and image named).
    """
    path = Path(path).expanduser()
    lines = json_records(path) if path.is_file() else None
    if not lines or not any(_has_parts(record) for _, record in lines):
        return None
    lines = lines[:limit] if limit is not None else lines
    prompts, references, where = [], [], []
    for number, record in lines:
        at = f"{path}:{number}"
        messages = record.get("messages") if isinstance(record, Mapping) else None
        if not isinstance(messages, list) or len(messages) < 2:
            raise ValueError(
                f'{at}: expected {{"messages": [<user turn with image parts>, <assistant reference>]}}, got '
                f"{str(record)[:100]!r}."
            )
        references.append(_reference(messages[-1], at))
        prompts.append({**record, "messages": messages[:-1]})
        where.append(at)
    check_image_rows(zip(where, prompts), "messages", "images", path.parent, str(path))
    return ImageSamples(path, prompts, references, where)


def image_samples_dataset(
    samples: ImageSamples, tokenizer: Tokenizer, image_transform: Any
) -> ImagePromptDataset:
    """The samples' prompts laid out for the model (its tokenizer and the family's image transform)."""
    return image_prompt_dataset(
        tokenizer,
        source=str(samples.path),
        image_transform=image_transform,
        records=samples.prompts,
        image_dir=str(samples.path.parent),
    )


def image_exact_match(
    model: nn.Module,
    tokenizer: Tokenizer,
    dataset: ImagePromptDataset,
    references: list[str],
    *,
    max_new_tokens: int = 64,
    batch_size: int = 8,
    normalize: Callable[[str], str] | None = normalize_whitespace,
) -> ExactMatchResult:
    """Greedy-decode an answer to each image prompt of `dataset` and count those equal to their reference.

    Args:
        model: an image-text model (`ftune.modules.vision.ImageTextModel`).
        tokenizer: decodes the answers; its `stop_tokens` end an answer.
        dataset: the prompts with their images (`image_samples_dataset`).
        references: the reference answer of each prompt, in order.
        max_new_tokens: the longest answer generated.
        batch_size: prompts generated together (with their images).
        normalize: applied to both prediction and reference before comparing; None compares raw strings.

    Returns:
        Counts, accuracy, and the decoded predictions.
    """
    return score_batches(
        model, tokenizer, _image_batches(dataset, references, batch_size), max_new_tokens, normalize
    )


def _image_batches(
    dataset: ImagePromptDataset, references: list[str], batch_size: int
) -> Iterator[tuple[list[tuple[list[int], str]], dict[str, Any]]]:
    """The prompts as batches of (prompt ids, reference), each with its images."""
    for start in range(0, len(dataset), batch_size):
        items = [dataset[i] for i in range(start, min(start + batch_size, len(dataset)))]
        prompts = image_prompts_batch(items, dataset)
        batch = list(zip(prompts.tokens, references[start : start + len(items)]))
        yield batch, {"pixel_values": prompts.pixel_values, "image_inputs": prompts.image_inputs}
