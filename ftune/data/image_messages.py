"""Messages with image parts: a record -> the conversation (an image part as the family's placeholder) and its images.

A record holds OpenAI/transformers-style messages whose content is a string or a list of parts,
``{"type": "text", "text": ...}`` and ``{"type": "image", ...}`` (the image's sources:
`ftune.config.image_checks`). Each message's content becomes one string: its text parts joined as
they are and each image part written as the image transform's `placeholder` (what the family's chat
template writes for it: ``<start_of_image>``, ``<image>``, ``<|image|>``); the dataset then lays the
image's tokens out in its place. Masking is the text path's (`ftune.data.transforms`): system
always masked, user and tool masked unless `train_on_input`, assistant trained; image tokens are
never trained, in any message (the dataset masks them).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image

from ftune.config.image_checks import read_record_images
from ftune.config.record_checks import text_problem
from ftune.data.messages import Message
from ftune.data.transforms import resolve_column_map


def _content_text(content: Any, placeholder: str, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f"{text_problem(content, f'{where}.content')} (or a list of text and image parts)")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "image":
            texts.append(placeholder)
        elif kind == "text":
            problem = text_problem(part.get("text"), f"{where}.content[{j}].text")
            if problem is not None:
                raise ValueError(problem)
            texts.append(part["text"])
        else:
            shown = repr(kind) if isinstance(part, Mapping) else f"a {type(part).__name__}"
            raise ValueError(
                f"{where}.content[{j}] is a part of type {shown}; accepted parts are "
                "{'type': 'text', 'text': ...} and {'type': 'image', ...} (see docs/glossary.md, image tokens)."
            )
    return "".join(texts)


class ImageMessagesTransform:
    """A record {"messages": [...], "images": [...]} -> (messages, images).

    Args:
        placeholder: the text an image part becomes (the image transform's `placeholder`).
        train_on_input: also train on user turns (system turns and image tokens are never trained).
        column_map: {"messages": ..., "images": ...} -> your column names ("images" is optional data).
        new_system_prompt: replace any system turn with this one.
        base_dir: the folder relative image paths are read from (the data file's folder).
    """

    expected = ("messages", "images")

    def __init__(
        self,
        placeholder: str,
        *,
        train_on_input: bool = False,
        column_map: Mapping[str, str] | None = None,
        new_system_prompt: str | None = None,
        base_dir: str | Path | None = None,
    ) -> None:
        self.columns = resolve_column_map(type(self).__name__, self.expected, column_map)
        self.placeholder = placeholder
        self.train_on_input = train_on_input
        self.new_system_prompt = new_system_prompt
        self.base_dir = None if base_dir is None else str(base_dir)

    @property
    def required_columns(self) -> list[str]:
        """Columns a dataset must have (the images column is optional: parts may hold their images)."""
        return [self.columns["messages"]]

    def messages(self, record: Mapping[str, Any]) -> list[Message]:
        """The record's conversation, each image part written as the placeholder.

        Raises:
            KeyError: the record has no messages column.
            ValueError: a turn that is not a role/content dict, a part that is neither text nor image.
        """
        column = self.columns["messages"]
        if column not in record:
            raise KeyError(
                f"ImageMessagesTransform: column {column!r} is not in the record; the record has columns "
                f"{sorted(record)}. Set column_map={{'messages': '<your column>'}}."
            )
        out = []
        for i, turn in enumerate(record[column]):
            if not isinstance(turn, Mapping) or "role" not in turn:
                raise ValueError(
                    f"{column}[{i}]: expected a dict with keys 'role' and 'content', got {turn!r}."
                )
            role = turn["role"]
            masked = role == "system" or (role != "assistant" and not self.train_on_input)
            out.append(
                Message(
                    role,
                    _content_text(turn.get("content"), self.placeholder, f"{column}[{i}]"),
                    masked=masked,
                )
            )
        if self.new_system_prompt is not None:
            out = [
                Message("system", self.new_system_prompt, masked=True),
                *(m for m in out if m.role != "system"),
            ]
        return out

    def images(self, record: Mapping[str, Any]) -> list[Image.Image]:
        """The record's images, read, in prompt order.

        Raises:
            ImageReadError: an image cannot be read (naming it), or image parts and images column disagree.
        """
        base = None if self.base_dir is None else Path(self.base_dir)
        return read_record_images(record, self.columns["messages"], self.columns["images"], base)

    def __call__(self, record: Mapping[str, Any]) -> tuple[list[Message], list[Image.Image]]:
        return self.messages(record), self.images(record)


def expand_placeholders(text: str, placeholder: str, image_texts: list[str]) -> str:
    """`text` with its k-th `placeholder` replaced by `image_texts[k]`, as the family's processor lays a prompt out.

    Use it on a rendered prompt (e.g. for generation); the dataset does the same on token ids.

    Raises:
        ValueError: the number of placeholders differs from the number of images.
    """
    pieces = text.split(placeholder)
    if len(pieces) - 1 != len(image_texts):
        raise ValueError(
            f"The prompt has {len(pieces) - 1} image placeholder(s) {placeholder!r} but {len(image_texts)} image(s) "
            "were given; write one placeholder where each image goes."
        )
    return pieces[0] + "".join(image + rest for image, rest in zip(image_texts, pieces[1:]))
