"""Image-grounded preference pairs (DPO with images): a conversation with image parts, a chosen and a rejected answer.

A record holds the prompt's turns (``messages``: user turns with ``{"type": "image", ...}`` parts, as
`ftune.datasets.multimodal_chat_dataset` reads them) and the two answers to its last turn::

    {"messages": [{"role": "user", "content": [{"type": "image", "image": "cat.png"},
                                               {"type": "text", "text": "What animal is it?"}]}],
     "chosen": "A cat.", "rejected": "A dog."}

An answer is a string, a list of content parts, or a list of turns (``{"role": "assistant", ...}``:
TRL's conversational layout, whose prompt column is ``prompt``: ``column_map={"messages": "prompt"}``,
its images in an ``images`` column). The images are read and transformed once a record, and both
answers are laid out after the same prompt: each item carries them once, and the preference collate
gives the chosen rows and the rejected rows each their copy (`ftune.data.padded_collate_preference`),
so the policy and the reference see the images with both answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ftune.config.image_checks import check_image_rows
from ftune.config.record_checks import answer_problem, check_answer_rows
from ftune.data.image_messages import ImageMessagesTransform
from ftune.data.messages import Message
from ftune.datasets.multimodal import MultimodalSFTDataset, image_base_dir, image_records, image_transform_of

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer

SIDES = ("chosen", "rejected")


def answer_turns(value: Any, column: str) -> list[dict[str, Any]]:
    """An answer as assistant turns: a string or content parts make one turn, a list of turns stays.

    Raises:
        ValueError: an empty answer, or one of another type (naming `column`).
    """
    problem = answer_problem(value, column)
    if problem is not None:
        raise ValueError(f"{problem}.")
    if isinstance(value, list) and all(isinstance(t, Mapping) and "role" in t for t in value):
        return list(value)
    return [{"role": "assistant", "content": value}]


class ImagePreferenceDataset(torch.utils.data.Dataset):
    """Records -> {"chosen_tokens", "chosen_labels", "rejected_tokens", "rejected_labels", "images"}.

    Args:
        records: indexable records (a `datasets.Dataset` or a list of dicts).
        layout: the `MultimodalSFTDataset` that reads a record's prompt and images and lays a
            conversation out (its tokenizer, message and image transforms, max_seq_len).
        columns: {"chosen": ..., "rejected": ...} -> the records' column names.

    Collate with `ftune.data.padded_collate_preference` (it stacks the images of both halves).
    """

    def __init__(
        self, records: Sequence[Mapping[str, Any]], layout: MultimodalSFTDataset, columns: Mapping[str, str]
    ) -> None:
        self.records, self.layout, self.columns = records, layout, dict(columns)
        # the answers' turns, without the prompt's system turn (new_system_prompt) or images
        self.answers = ImageMessagesTransform(layout.image_transform.placeholder)

    def __len__(self) -> int:
        return len(self.records)

    def answer(self, record: Mapping[str, Any], side: str, where: str) -> list[Message]:
        try:
            turns = answer_turns(record.get(self.columns[side]), self.columns[side])
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from e
        return self.answers.messages({"messages": turns})

    def __getitem__(self, index: int) -> dict[str, Any]:
        where = f"Dataset {self.layout.source} row {index + 1}"
        record = self.records[index]
        prompt, inputs = self.layout.read(record, where)
        item: dict[str, Any] = {"images": inputs}
        for side in SIDES:
            laid = self.layout.laid_out(prompt + self.answer(record, side, where), inputs, where)
            item[f"{side}_tokens"], item[f"{side}_labels"] = laid["tokens"], laid["labels"]
        return item


def image_preference_dataset(
    tokenizer: Tokenizer,
    *,
    source: str,
    image_transform: Any,
    data_files: str | list[str] | dict[str, Any] | None = None,
    split: str = "train",
    name: str | None = None,
    column_map: dict[str, str] | None = None,
    new_system_prompt: str | None = None,
    image_dir: str | None = None,
    max_seq_len: int | None = None,
    packed: bool = False,
    records: Sequence[Mapping[str, Any]] | None = None,
) -> ImagePreferenceDataset:
    """Preference pairs whose prompts hold images, for the DPO recipes (see the module docstring).

    Every image of every record is read when the dataset loads, so an unreadable one fails now with its
    row; `ftune run` reads those of a local file before the model loads.

    Args:
        tokenizer: the vision model's tokenizer (passed positionally by the recipe).
        source: hub id, local file (.json .jsonl .parquet) or folder, or builder name.
        image_transform: the family's transform or name (as `multimodal_chat_dataset` takes it).
        data_files: files for a builder name or a folder.
        split: split to load.
        name: hub dataset configuration name.
        column_map: {"messages": ..., "images": ..., "chosen": ..., "rejected": ...} -> your column names.
        new_system_prompt: replace any system turn with this one.
        image_dir: the folder relative image paths are read from (default: the data file's folder).
        max_seq_len: truncate each answer's sequence (a cut through an image's tokens is refused).
        packed: refused: pairs with images are not packed.
        records: the records themselves (a Python caller's; `source` then only names them).

    Returns:
        An `ImagePreferenceDataset`.

    Raises:
        ValueError: packed=True, an unknown image transform or column, a record without an answer,
            an unreadable image (row named).
    """
    if packed:
        raise ValueError(
            f"dataset.packed: image_preference_dataset ({source}) does not pack: a pack would mix several "
            "samples' images, and DPO scores each answer as a whole. Given true, accepted: false. Fix: set "
            "dataset.packed=false and collate_fn=null (right padding; the images go with each row)."
        )
    transform = image_transform_of(image_transform)
    column_map = dict(column_map or {})
    unknown = set(column_map) - {"messages", "images", *SIDES}
    if unknown:
        raise ValueError(
            f"image_preference_dataset ({source}): column_map maps {sorted(unknown)}; it accepts messages, "
            "images, chosen and rejected."
        )
    columns = {side: column_map.pop(side, side) for side in SIDES}
    base = image_base_dir(source, image_dir)
    messages = ImageMessagesTransform(
        transform.placeholder, column_map=column_map, new_system_prompt=new_system_prompt, base_dir=base
    )
    required = [messages.columns["messages"], *columns.values()]
    records, rows = image_records(
        source,
        required,
        "image_preference_dataset",
        records=records,
        data_files=data_files,
        split=split,
        name=name,
    )
    check_answer_rows(rows, columns.values(), source)  # both answers present, before any image is read
    check_image_rows(rows, messages.columns["messages"], messages.columns["images"], base, source)
    layout = MultimodalSFTDataset(
        records, tokenizer, messages, transform, max_seq_len=max_seq_len, source=source
    )
    return ImagePreferenceDataset(records, layout, columns)
