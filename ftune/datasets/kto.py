"""Unpaired preference data for KTO: a prompt, one completion, and whether it is desirable."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ftune.config.data_files import json_records
from ftune.config.record_checks import KTO_FIELDS, check_kto_rows
from ftune.data.messages import Message
from ftune.data.transforms import openai_messages
from ftune.datasets.sft import check_columns, labels_from_mask
from ftune.datasets.source import load_source

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer


class KTODataset(torch.utils.data.Dataset):
    """Records -> {"prompt_tokens", "completion_tokens", "completion_labels", "label"}.

    The prompt is the conversation's tokens up to the first trained one (the chat template's header
    of the answer included); the completion is the rest, so ``padded_collate_kto`` can put a
    completion after another record's prompt (KTO's mismatched rows).

    Args:
        records: indexable records (a `datasets.Dataset` or a list of dicts).
        tokenizer: the model's tokenizer.
        columns: "prompt", "completion", "label" -> the records' column names.
        new_system_prompt: when set, replaces any system message.
        max_seq_len: when set, prompt plus completion is truncated to this length.

    Collate with `ftune.data.padded_collate_kto` (the DPO recipes' default collate picks it).
    """

    def __init__(
        self,
        records: Sequence[Mapping[str, Any]],
        tokenizer: Tokenizer,
        columns: Mapping[str, str],
        *,
        new_system_prompt: str | None = None,
        max_seq_len: int | None = None,
    ) -> None:
        self.records, self.tokenizer, self.columns = records, tokenizer, dict(columns)
        self.new_system_prompt, self.max_seq_len = new_system_prompt, max_seq_len

    def messages(self, record: Mapping[str, Any]) -> list[Message]:
        """The record's conversation: the prompt (masked) then the completion (trained)."""
        prompt, completion = record[self.columns["prompt"]], record[self.columns["completion"]]
        turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        answer = (
            [{"role": "assistant", "content": completion}]
            if isinstance(completion, str)
            else list(completion)
        )
        messages = openai_messages(turns + answer, train_on_input=False, where=self.columns["prompt"])
        if self.new_system_prompt is None:
            return messages
        return [Message("system", self.new_system_prompt, masked=True)] + [
            m for m in messages if m.role != "system"
        ]

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, Any]:
        record = self.records[index]
        tokens, mask = self.tokenizer.tokenize_messages(self.messages(record), add_eos=True)
        tokens, mask = list(tokens)[: self.max_seq_len], list(mask)[: self.max_seq_len]
        start = next((i for i, masked in enumerate(mask) if not masked), len(tokens))
        return {
            "prompt_tokens": tokens[:start],
            "completion_tokens": tokens[start:],
            "completion_labels": labels_from_mask(tokens[start:], mask[start:]),
            "label": bool(record[self.columns["label"]]),
        }


def kto_dataset(
    tokenizer: Tokenizer,
    *,
    source: str,
    data_files: str | list[str] | dict[str, Any] | None = None,
    split: str = "train",
    name: str | None = None,
    column_map: dict[str, str] | None = None,
    new_system_prompt: str | None = None,
    max_seq_len: int | None = None,
) -> KTODataset:
    """Unpaired answers for KTO (``ftune.training.KTOLoss``), in TRL's unpaired preference format.

    Records are {"prompt": str or [messages], "completion": str or [assistant messages], "label": bool}:
    ``label`` true for a desirable answer, false for an undesirable one.

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        source: hub id, local file (.json .jsonl .parquet) or folder, or builder name.
        data_files: files for a builder name or a folder.
        split: split to load.
        name: hub dataset configuration name.
        column_map: {"prompt": ..., "completion": ..., "label": ...} -> your column names.
        new_system_prompt: replace any system turn with this one.
        max_seq_len: truncate each prompt plus completion to this length.

    Returns:
        A `KTODataset`.

    Raises:
        KeyError: for a column_map key other than prompt, completion and label, or a missing column.
        ValueError: a record without a prompt, a completion or a true/false label (file:line for a
            local .json/.jsonl file, else the row number), or a set whose labels are all one value.
    """
    unknown = sorted(set(column_map or {}) - set(KTO_FIELDS))
    if unknown:
        raise KeyError(
            f"dataset.column_map: kto_dataset ({source}) reads {list(KTO_FIELDS)}; got the key(s) {unknown}. "
            "Map each of those names to your column, e.g. column_map={'completion': 'response'}."
        )
    columns = {field: (column_map or {}).get(field, field) for field in KTO_FIELDS}
    path = Path(source).expanduser()
    whole_file = path.is_file() and split == "train" and data_files is None and path.stat().st_size > 0
    lines = json_records(path) if whole_file else None
    if lines is not None:  # before the loader, which fails on mixed types without saying where
        check_kto_rows([(f"{path}:{number}", record) for number, record in lines], columns, source)
    records = load_source(source, data_files=data_files, split=split, name=name)
    check_columns(records, list(columns.values()), "kto_dataset", source)
    if lines is None:
        values = {c: records[c] for c in columns.values()}  # one Arrow -> Python conversion per column
        rows = [(f"row {i + 1}", {c: values[c][i] for c in values}) for i in range(len(records))]
        check_kto_rows(rows, columns, source)
    return KTODataset(
        records, tokenizer, columns, new_system_prompt=new_system_prompt, max_seq_len=max_seq_len
    )
