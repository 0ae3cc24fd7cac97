"""Plain-text datasets for continued pre-training: every token is trained on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ftune.data.packing import Overlong, PackedDataset
from ftune.data.transforms import resolve_column_map
from ftune.datasets.sft import check_columns, dataset_cache_key, maybe_pack
from ftune.datasets.source import load_source

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer


class TextCompletionDataset(torch.utils.data.Dataset):
    """Records with a text column -> {"tokens", "labels"} with labels equal to tokens.

    Args:
        records: indexable records (a `datasets.Dataset` or a list of dicts).
        tokenizer: the model's tokenizer.
        column: the text column.
        add_eos: append the end-of-sequence token to every text.
        max_seq_len: when set, truncate to this many tokens.
    """

    def __init__(
        self,
        records: Sequence[Mapping[str, Any]],
        tokenizer: Tokenizer,
        *,
        column: str = "text",
        add_eos: bool = True,
        max_seq_len: int | None = None,
    ) -> None:
        self.records = records
        self.tokenizer = tokenizer
        self.column = column
        self.add_eos = add_eos
        self.max_seq_len = max_seq_len

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        tokens = list(
            self.tokenizer.encode(str(self.records[index][self.column]), add_bos=True, add_eos=self.add_eos)
        )
        if self.max_seq_len is not None:
            tokens = tokens[: self.max_seq_len]
        return {"tokens": tokens, "labels": list(tokens)}


def text_completion_dataset(
    tokenizer: Tokenizer,
    *,
    source: str,
    data_files: str | list[str] | dict[str, Any] | None = None,
    split: str = "train",
    name: str | None = None,
    column_map: dict[str, str] | None = None,
    add_eos: bool = True,
    max_seq_len: int | None = None,
    packed: bool = False,
    overlong: Overlong = "split",
    pack_cache_dir: str | None = None,
) -> TextCompletionDataset | PackedDataset:
    """Unstructured text (a .txt file gives one sample per line, in column "text").

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        source: hub id, local file (.txt .json .jsonl .csv .parquet) or folder, or builder name.
        data_files: files for a builder name or a folder.
        split: split to load.
        name: hub dataset configuration name.
        column_map: {"text": <your text column>}.
        add_eos: append the end-of-sequence token to every sample.
        max_seq_len: truncate each sample; also the pack length when packed.
        packed: pack samples into fixed-length rows (usual for pre-training).
        overlong: when packing, "split" (default), "truncate" or "drop" texts longer than the pack.
        pack_cache_dir: when packing, cache the packed rows in this folder.

    Returns:
        A dataset of {"tokens", "labels"} items (packed items when `packed=True`).
    """
    column = resolve_column_map("text_completion_dataset", ("text",), column_map)["text"]
    records = load_source(source, data_files=data_files, split=split, name=name)
    check_columns(records, [column], "text_completion_dataset", source)
    # when packing with "split" or "drop", the packer must see the full length of over-long texts
    truncate = max_seq_len if not packed or overlong == "truncate" else None
    ds = TextCompletionDataset(records, tokenizer, column=column, add_eos=add_eos, max_seq_len=truncate)
    key = None
    if packed and pack_cache_dir is not None:
        key = dataset_cache_key(records, tokenizer, kind="text", column=column, add_eos=add_eos)
    return maybe_pack(
        ds,
        tokenizer,
        packed=packed,
        max_seq_len=max_seq_len,
        overlong=overlong,
        pack_cache_dir=pack_cache_dir,
        cache_key=key,
        where=f"text_completion_dataset {source!r}",
    )
