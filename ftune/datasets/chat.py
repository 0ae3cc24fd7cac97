"""Multi-turn chat datasets: ShareGPT ("conversations" of from/value) or OpenAI ("messages" of role/content)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from ftune.data.packing import Overlong, PackedDataset
from ftune.data.transforms import OpenAIToMessages, ShareGPTToMessages
from ftune.datasets.sft import SFTDataset, build_sft

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer

CONVERSATION_STYLES = {"sharegpt": ShareGPTToMessages, "openai": OpenAIToMessages}


def chat_dataset(
    tokenizer: Tokenizer,
    *,
    source: str,
    conversation_style: Literal["sharegpt", "openai"],
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
    """Conversations, trained on the assistant turns.

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        source: hub id, local file (.json .jsonl .csv .parquet) or folder, or builder name.
        conversation_style: "sharegpt" (column "conversations", turns {"from": human|gpt|system,
            "value": ...}) or "openai" (column "messages", turns {"role": ..., "content": ...}).
        data_files: files for a builder name or a folder.
        split: split to load.
        name: hub dataset configuration name.
        column_map: {"conversations": ...} or {"messages": ...} -> your column name.
        train_on_input: also train on user turns (system turns are always masked).
        new_system_prompt: replace any system turn with this one.
        max_seq_len: truncate each sample; also the pack length when packed.
        packed: pack samples into fixed-length rows.
        overlong: when packing, "split", "truncate" or "drop" samples longer than the pack.
        pack_cache_dir: when packing, cache the packed rows in this folder.

    Returns:
        A dataset of {"tokens", "labels"} items (packed items when `packed=True`).

    Raises:
        ValueError: an unknown `conversation_style`.
    """
    if conversation_style not in CONVERSATION_STYLES:
        raise ValueError(
            f"chat_dataset: conversation_style={conversation_style!r} is not supported; accepted values are "
            f"{sorted(CONVERSATION_STYLES)}."
        )
    transform = CONVERSATION_STYLES[conversation_style](
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
