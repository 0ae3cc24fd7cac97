"""Llama 3.1 tokenizer: the Llama 3 one (same ranks file format, special tokens and prompt format)."""

from __future__ import annotations

from pathlib import Path

from ftune.models.llama3._tokenizer import llama3_tokenizer
from ftune.tokenizers.tiktoken import TiktokenTokenizer


def llama3_1_tokenizer(path: str | Path, max_seq_len: int | None = None) -> TiktokenTokenizer:
    """The Llama 3.1 tokenizer; see `ftune.models.llama3._tokenizer.llama3_tokenizer`.

    Args:
        path: the `tokenizer.model` file, or a folder holding it (directly or in `original/`).
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.
    """
    return llama3_tokenizer(path, max_seq_len=max_seq_len)
