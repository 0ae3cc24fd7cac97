"""Preference datasets (DPO-style): a prompt with a chosen and a rejected answer."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ftune.config.data_files import (
    check_margin_rows,
    check_preference_rows,
    identical_pairs_warning,
    json_records,
)
from ftune.data.messages import Message
from ftune.data.transforms import ChosenRejectedToMessages
from ftune.datasets.sft import check_columns, labels_from_mask
from ftune.datasets.source import load_source

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer

logger = logging.getLogger(__name__)


class PreferenceDataset(torch.utils.data.Dataset):
    """Records -> {"chosen_tokens", "chosen_labels", "rejected_tokens", "rejected_labels"}.

    Args:
        records: indexable records (a `datasets.Dataset` or a list of dicts).
        tokenizer: the model's tokenizer.
        message_transform: record -> {"chosen": list[Message], "rejected": list[Message]}.
        max_seq_len: when set, both sides are truncated to this length.
        margin_column: the column of each pair's required reward margin (a reward model's loss), or None.

    Collate with `ftune.data.padded_collate_preference`.
    """

    def __init__(
        self,
        records: Sequence[Mapping[str, Any]],
        tokenizer: Tokenizer,
        message_transform: Callable[[Mapping[str, Any]], dict[str, list[Message]]],
        *,
        max_seq_len: int | None = None,
        margin_column: str | None = None,
    ) -> None:
        self.records = records
        self.tokenizer = tokenizer
        self.message_transform = message_transform
        self.max_seq_len = max_seq_len
        self.margin_column = margin_column

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        sides = self.message_transform(self.records[index])
        item = {}
        for side in ("chosen", "rejected"):
            tokens, mask = self.tokenizer.tokenize_messages(sides[side], add_eos=True)
            labels = labels_from_mask(tokens, mask)
            end = self.max_seq_len
            item[f"{side}_tokens"], item[f"{side}_labels"] = list(tokens)[:end], labels[:end]
        if self.margin_column is not None:
            item["margin"] = float(self.records[index][self.margin_column])
        return item


def preference_dataset(
    tokenizer: Tokenizer,
    *,
    source: str,
    data_files: str | list[str] | dict[str, Any] | None = None,
    split: str = "train",
    name: str | None = None,
    column_map: dict[str, str] | None = None,
    train_on_input: bool = False,
    new_system_prompt: str | None = None,
    max_seq_len: int | None = None,
    packed: bool = False,
    margin_column: str | None = None,
) -> PreferenceDataset:
    """Pairs of answers to one prompt, for preference training (no packing).

    Records are either {"chosen": [turns], "rejected": [turns]} (full conversations of
    role/content dicts) or {"prompt": str, "chosen": str, "rejected": str}.

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        source: hub id, local file (.json .jsonl .parquet) or folder, or builder name.
        data_files: files for a builder name or a folder.
        split: split to load.
        name: hub dataset configuration name.
        column_map: {"prompt": ..., "chosen": ..., "rejected": ...} -> your column names.
        train_on_input: also train on prompt tokens.
        new_system_prompt: replace any system turn with this one.
        max_seq_len: truncate both sides to this length.
        packed: must be false: preference pairs are not packed (the key exists so that
            ``dataset.packed=true`` gets this message rather than an unknown-argument error).
        margin_column: a column of numbers, each pair's required reward margin ``m`` in a reward
            model's loss ``-log σ(r_c - r_r - m)`` (TRL's RewardTrainer reads a column named
            "margin"); None: no margin. Other recipes ignore it.

    Returns:
        A `PreferenceDataset`.

    Raises:
        ValueError: if ``packed`` is true, a margin is not a number, or a record lacks an answer or
            the prompt, or has one empty (file:line for a local .json/.jsonl file, else the row number). Records whose
            chosen answer equals the rejected one are counted in a warning.
    """
    if packed:
        raise ValueError(
            f"dataset.packed: preference_dataset ({source}) does not pack: DPO scores each chosen and rejected "
            "answer as a whole. Given true, accepted: false. Fix: set dataset.packed=false; to lay each batch's "
            "pairs end to end without padding, set collate_fn._component_=ftune.data.padding_free_collate_preference "
            "(the shipped DPO configs do)."
        )
    transform = ChosenRejectedToMessages(
        train_on_input=train_on_input, column_map=column_map, new_system_prompt=new_system_prompt
    )
    path = Path(source).expanduser()
    whole_file = path.is_file() and split == "train" and data_files is None and path.stat().st_size > 0
    lines = json_records(path) if whole_file else None
    if lines is not None:  # before the loader, which fails on mixed types without saying where
        _check_rows([(f"{path}:{number}", record) for number, record in lines], transform.columns, source)
    records = load_source(source, data_files=data_files, split=split, name=name)
    check_columns(records, transform.required_columns, "ChosenRejectedToMessages", source)
    if lines is None:
        present = [c for c in dict.fromkeys(transform.columns.values()) if c in records.column_names]
        values = {c: records[c] for c in present}  # one Arrow -> Python conversion per column
        rows = [(f"row {i + 1}", {c: values[c][i] for c in present}) for i in range(len(records))]
        _check_rows(rows, transform.columns, source)
    if margin_column is not None:
        check_columns(records, [margin_column], "preference_dataset(margin_column)", source)
        margins = records[margin_column]
        check_margin_rows(
            [(f"row {i + 1}", {margin_column: v}) for i, v in enumerate(margins)], margin_column, source
        )
    return PreferenceDataset(
        records, tokenizer, transform, max_seq_len=max_seq_len, margin_column=margin_column
    )


def _check_rows(rows: list[tuple[str, Any]], columns: Mapping[str, str], source: str) -> None:
    """Refuse unusable records (see `ftune.config.data_files.check_preference_rows`); warn on chosen == rejected.

    A whole local .json/.jsonl file is read with `json` to name file:line; other sources are
    checked on the loaded records, by row number.
    """
    identical = check_preference_rows(rows, columns, source)
    if identical:
        logger.warning(identical_pairs_warning(identical, len(rows), source))
