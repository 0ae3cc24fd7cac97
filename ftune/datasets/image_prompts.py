"""Prompts with images for online RL (GRPO with images): a conversation to answer and the fields its rewards read.

A record holds the prompt's turns (``messages``: user turns with ``{"type": "image", ...}`` parts, as
`ftune.datasets.multimodal_chat_dataset` reads them, ending in a user turn) and any other fields (a
reference answer, a label)::

    {"messages": [{"role": "user", "content": [{"type": "image", "image": "images/0.png"},
                                               {"type": "text", "text": "What colour is the shape?"}]}],
     "answer": "red"}

Each item is the prompt's tokens in the model's chat format with its images' tokens laid out, ending
where the assistant's reply begins, its images (transformed), the last turn's text (the ``prompt``
the rewards receive, without the image placeholders) and the record's other fields (``sample``).
`ftune.data.collate_prompts` stacks the images; the rollout samples with them and the update's
forward sees each completion's prompt images again (``ftune.generation.Rollout.pixel_values``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ftune.config.image_checks import check_image_rows
from ftune.data.image_messages import ImageMessagesTransform
from ftune.datasets.multimodal import MultimodalSFTDataset, image_base_dir, image_records, image_transform_of

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer


class ImagePromptDataset(torch.utils.data.Dataset):
    """Records -> {"tokens", "prompt", "sample", "index", "images"} (collate with ``ftune.data.collate_prompts``).

    Args:
        records: indexable records (a `datasets.Dataset` or a list of dicts).
        layout: the `MultimodalSFTDataset` that reads a record's turns and images and lays a prompt out.
    """

    def __init__(self, records: Sequence[Mapping[str, Any]], layout: MultimodalSFTDataset) -> None:
        self.records, self.layout = records, layout
        columns = layout.message_transform.columns
        self.hidden_columns = {columns["messages"], columns["images"]}

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        where = f"Dataset {self.layout.source} row {index + 1}"
        record = self.records[index]
        messages, inputs = self.layout.read(record, where)
        if not messages or messages[-1].role == "assistant":
            raise ValueError(
                f"{where}: the prompt's turns end with {messages[-1].role if messages else 'nothing'!r}; a prompt "
                "ends with the turn the model answers (a user turn). Drop the assistant's answer from the "
                "messages (keep it in another field, e.g. 'answer', for the rewards)."
            )
        tokens = self.layout.prompt_tokens(messages, inputs, where)
        prompt = messages[-1].content.replace(self.layout.image_transform.placeholder, "")
        sample = {k: v for k, v in dict(record).items() if k not in self.hidden_columns}
        return {"tokens": tokens, "prompt": prompt, "sample": sample, "index": index, "images": inputs}


def image_prompt_dataset(
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
    records: Sequence[Mapping[str, Any]] | None = None,
) -> ImagePromptDataset:
    """Prompts with images and the fields their rewards read, for the GRPO recipes (module docstring).

    Every image of every record is read when the dataset loads, so an unreadable one fails now with its
    row; `ftune run` reads those of a local file before the model loads.

    Args:
        tokenizer: the vision model's tokenizer (passed positionally by the recipe).
        source: hub id, local file (.json .jsonl .parquet) or folder, or builder name.
        image_transform: the family's transform or name (as `multimodal_chat_dataset` takes it).
        data_files: files for a builder name or a folder.
        split: split to load.
        name: hub dataset configuration name.
        column_map: {"messages": ..., "images": ...} -> your column names; the other columns reach the
            rewards under their own names.
        new_system_prompt: replace any system turn with this one.
        image_dir: the folder relative image paths are read from (default: the data file's folder).
        records: the records themselves (a Python caller's; `source` then only names them).

    Returns:
        An `ImagePromptDataset`.

    Raises:
        ValueError: an unknown image transform or column, an unreadable image (row named).
    """
    transform = image_transform_of(image_transform)
    base = image_base_dir(source, image_dir)
    messages = ImageMessagesTransform(
        transform.placeholder, column_map=column_map, new_system_prompt=new_system_prompt, base_dir=base
    )
    records, rows = image_records(
        source, messages.required_columns, "image_prompt_dataset",
        records=records, data_files=data_files, split=split, name=name,
    )  # fmt: skip
    check_image_rows(rows, messages.columns["messages"], messages.columns["images"], base, source)
    layout = MultimodalSFTDataset(records, tokenizer, messages, transform, source=source)
    return ImagePromptDataset(records, layout)
