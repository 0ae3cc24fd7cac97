"""Instruction datasets: single-turn prompt/answer records (alpaca, or any input/output columns)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ftune.data.packing import Overlong, PackedDataset
from ftune.data.transforms import AlpacaToMessages, InputOutputToMessages
from ftune.datasets.sft import SFTDataset, build_sft

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer


def instruct_dataset(
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
    overlong: Overlong = "split",
    pack_cache_dir: str | None = None,
) -> SFTDataset | PackedDataset:
    """Single-turn records {"input": prompt, "output": answer} as a user/assistant exchange.

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        source: hub id, local file (.json .jsonl .csv .parquet .txt) or folder, or a builder name
            ("json", "csv", ...) together with `data_files`.
        data_files: files for a builder name or a folder.
        split: split to load; slices like "train[:1000]" work.
        name: hub dataset configuration name.
        column_map: {"input": <your prompt column>, "output": <your answer column>}.
        train_on_input: also train on the prompt tokens (default: only on the answer).
        new_system_prompt: prepend this system message (always masked).
        max_seq_len: truncate each sample; also the pack length when packed.
        packed: pack samples into fixed-length rows.
        overlong: when packing, "split", "truncate" or "drop" samples longer than the pack.
        pack_cache_dir: when packing, cache the packed rows in this folder.

    Returns:
        A dataset of {"tokens", "labels"} items (packed items when `packed=True`).
    """
    transform = InputOutputToMessages(
        train_on_input=train_on_input, column_map=column_map, new_system_prompt=new_system_prompt
    )
    return build_sft(
        tokenizer,
        transform,
        source=source,
        data_files=data_files,
        split=split,
        name=name,
        max_seq_len=max_seq_len,
        packed=packed,
        overlong=overlong,
        pack_cache_dir=pack_cache_dir,
    )


def alpaca_dataset(
    tokenizer: Tokenizer,
    *,
    source: str = "tatsu-lab/alpaca",
    data_files: str | list[str] | dict[str, Any] | None = None,
    split: str = "train",
    column_map: dict[str, str] | None = None,
    train_on_input: bool = False,
    max_seq_len: int | None = None,
    packed: bool = False,
    overlong: Overlong = "split",
    pack_cache_dir: str | None = None,
) -> SFTDataset | PackedDataset:
    """Alpaca-style records {"instruction", "input", "output"} with the alpaca prompt text.

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        source: hub id (default "tatsu-lab/alpaca"), local file or folder, or builder name.
        data_files: files for a builder name or a folder.
        split: split to load.
        column_map: {"instruction": ..., "input": ..., "output": ...} -> your column names.
        train_on_input: also train on the prompt tokens (default: only on the answer).
        max_seq_len: truncate each sample; also the pack length when packed.
        packed: pack samples into fixed-length rows.
        overlong: when packing, "split", "truncate" or "drop" samples longer than the pack.
        pack_cache_dir: when packing, cache the packed rows in this folder.

    Returns:
        A dataset of {"tokens", "labels"} items (packed items when `packed=True`).
    """
    return build_sft(
        tokenizer,
        AlpacaToMessages(train_on_input=train_on_input, column_map=column_map),
        source=source,
        data_files=data_files,
        split=split,
        max_seq_len=max_seq_len,
        packed=packed,
        overlong=overlong,
        pack_cache_dir=pack_cache_dir,
    )
