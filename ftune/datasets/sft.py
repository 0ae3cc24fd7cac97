"""Supervised fine-tuning dataset: records -> messages -> {"tokens", "labels"}, optionally packed."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ftune.data.collate import CROSS_ENTROPY_IGNORE_IDX
from ftune.data.messages import Message
from ftune.data.packing import Overlong, PackedDataset
from ftune.datasets.source import load_source

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer

log = logging.getLogger(__name__)

_PROBE = [
    Message("system", "You are a careful assistant.", masked=True),
    Message("user", "Hello, world! 0123456789 ünïcödé\tend", masked=True),
    Message("assistant", "Ça va? 42 - done."),
]


def check_columns(records: Any, required: Sequence[str], reader: str, source: str) -> None:
    """Raise early, with the fix, when the data lacks a column the transform reads."""
    columns = getattr(records, "column_names", None)
    if columns is None:
        return
    missing = [c for c in required if c not in columns]
    if missing:
        raise KeyError(
            f"Dataset {source!r} has no column(s) {missing} needed by {reader}; its "
            f"columns are {list(columns)}. Map them with column_map, e.g. "
            f"column_map={{{missing[0]!r}: {columns[0]!r}}}."
        )


def tokenizer_fingerprint(tokenizer: Tokenizer) -> str:
    """A short hash of a tokenizer's behaviour (ids, special tokens, chat format) for cache keys."""
    tokens, mask = tokenizer.tokenize_messages(list(_PROBE), add_eos=True)
    parts = [
        type(tokenizer).__qualname__,
        tokenizer.vocab_size,
        tokenizer.bos_id,
        tokenizer.eos_id,
        tokenizer.pad_id,
        tokenizer.max_seq_len,
        list(tokens),
        [bool(m) for m in mask],
        list(tokenizer.encode("The quick brown fox jumps over 13 lazy dogs.", add_bos=True, add_eos=True)),
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def dataset_cache_key(records: Any, tokenizer: Tokenizer, **settings: Any) -> str | None:
    """Identify a tokenized dataset by its data fingerprint, its settings and the tokenizer, or None.

    Args:
        records: a `datasets.Dataset` (its fingerprint covers the files and their content).
        tokenizer: the tokenizer; identified by `tokenizer_fingerprint`.
        settings: plain values (str, int, bool, dicts, lists) that change the tokenized samples.

    Returns:
        A key string, or None when `records` has no fingerprint (not a `datasets.Dataset`).
    """
    fingerprint = getattr(records, "_fingerprint", None)  # set by `datasets` for every loaded Dataset
    if fingerprint is None:
        return None
    return json.dumps([fingerprint, tokenizer_fingerprint(tokenizer), settings], sort_keys=True)


def transform_settings(transform: object) -> dict[str, Any]:
    """A transform's class name and public attributes (its columns and flags), for cache keys."""
    return {
        "class": type(transform).__qualname__,
        **{k: v for k, v in vars(transform).items() if not k.startswith("_")},
    }


def labels_from_mask(tokens: Sequence[int], mask: Sequence[bool]) -> list[int]:
    """Labels aligned with tokens: the token id, or the ignore index where masked."""
    return [CROSS_ENTROPY_IGNORE_IDX if m else t for t, m in zip(tokens, mask)]


class SFTDataset(torch.utils.data.Dataset):
    """Map-style dataset tokenizing each record's conversation on access.

    Args:
        records: indexable records (a `datasets.Dataset` or a list of dicts).
        tokenizer: turns messages into tokens and a loss mask.
        message_transform: record -> list[Message] (see `ftune.data.transforms`).
        max_seq_len: when set, tokens and labels are truncated to this length.
        source: where the records came from, for messages (``<source> row N``).

    Items are {"tokens": list[int], "labels": list[int]} of equal length.
    """

    def __init__(
        self,
        records: Sequence[Mapping[str, Any]],
        tokenizer: Tokenizer,
        message_transform: Callable[[Mapping[str, Any]], list[Message]],
        *,
        max_seq_len: int | None = None,
        source: str = "records",
    ) -> None:
        self.records = records
        self.tokenizer = tokenizer
        self.message_transform = message_transform
        self.max_seq_len = max_seq_len
        self.source = source

    def messages(self, index: int, record: Mapping[str, Any] | None = None) -> list[Message]:
        """Record `index` as messages; a record the transform refuses is named by its row.

        Raises:
            ValueError: ``Dataset <source> row N: <what the transform refused>``.
        """
        try:
            return self.message_transform(self.records[index] if record is None else record)
        except (ValueError, KeyError) as e:
            text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise ValueError(f"Dataset {self.source} row {index + 1}: {text}") from e

    def check_rows(self, batch_size: int = 1000) -> None:
        """Run the transform over every record (no tokenizing), so a bad one fails now, not mid-run.

        Raises:
            ValueError: the first record the transform refuses, by its row.
        """
        batches = getattr(self.records, "iter", None)
        if batches is None:  # a list of records
            for i in range(len(self.records)):
                self.messages(i)
            return
        at = 0
        for batch in batches(batch_size=batch_size):
            for row in zip(*batch.values()):
                self.messages(at, dict(zip(batch, row)))
                at += 1

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        messages = self.messages(index)
        tokens, mask = self.tokenizer.tokenize_messages(messages, add_eos=True)
        labels = labels_from_mask(tokens, mask)
        if self.max_seq_len is not None:
            tokens, labels = tokens[: self.max_seq_len], labels[: self.max_seq_len]
        return {"tokens": list(tokens), "labels": labels}


def maybe_pack(
    dataset: Any,
    tokenizer: Tokenizer,
    *,
    packed: bool,
    max_seq_len: int | None,
    overlong: Overlong,
    pack_cache_dir: str | None,
    cache_key: str | None,
    where: str,
) -> Any:
    """Return `dataset`, or a PackedDataset of it when `packed` (pack length: max_seq_len or the tokenizer's)."""
    if not packed:
        return dataset
    pack_len = max_seq_len if max_seq_len is not None else tokenizer.max_seq_len
    if pack_len is None:
        raise ValueError(
            f"{where}: packed=True needs a pack length, but max_seq_len is not set on the dataset or the "
            "tokenizer. Set max_seq_len on the dataset (e.g. dataset.max_seq_len=2048)."
        )
    return PackedDataset(
        dataset,
        max_seq_len=pack_len,
        pad_id=tokenizer.pad_id,
        overlong=overlong,
        cache_dir=pack_cache_dir,
        cache_key=cache_key,
    )


def build_sft(
    tokenizer: Tokenizer,
    message_transform: Any,
    *,
    source: str,
    data_files: str | list[str] | dict[str, Any] | None = None,
    split: str = "train",
    name: str | None = None,
    max_seq_len: int | None = None,
    packed: bool = False,
    overlong: Overlong = "split",
    pack_cache_dir: str | None = None,
) -> SFTDataset | PackedDataset:
    """Load `source`, check its columns against the transform, wrap it as an SFTDataset (packed if asked).

    Args:
        tokenizer: the model's tokenizer.
        message_transform: record -> list[Message]; its `required_columns` are checked up front.
        source: hub id, local file or folder, or builder name (see `ftune.datasets.source.load_source`).
        data_files: files for a builder name or folder.
        split: split to load (slicing like "train[:1000]" works).
        name: hub dataset configuration name.
        max_seq_len: truncate each sample (when packed: the pack length, and samples longer than it
            are handled by `overlong`).
        packed: pack samples into rows of `max_seq_len` (or the tokenizer's max_seq_len).
        overlong: when packing, "split", "truncate" or "drop" samples longer than the pack.
        pack_cache_dir: when packing, cache the packed rows here (keyed by data, transform, tokenizer).

    Returns:
        The dataset.
    """
    records = load_source(source, data_files=data_files, split=split, name=name)
    required = getattr(message_transform, "required_columns", ())
    check_columns(records, required, type(message_transform).__name__, source)
    # when packing with "split" or "drop", the packer must see the full length of over-long samples
    truncate = max_seq_len if not packed or overlong == "truncate" else None
    ds = SFTDataset(records, tokenizer, message_transform, max_seq_len=truncate, source=source)
    ds.check_rows()
    key = None
    if packed and pack_cache_dir is not None:
        key = dataset_cache_key(
            records, tokenizer, kind="sft", transform=transform_settings(message_transform)
        )
    return maybe_pack(
        ds,
        tokenizer,
        packed=packed,
        max_seq_len=max_seq_len,
        overlong=overlong,
        pack_cache_dir=pack_cache_dir,
        cache_key=key,
        where=f"dataset {source!r}",
    )
