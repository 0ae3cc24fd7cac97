"""Code Llama tokenizer: Llama 2's sentencepiece tokenizer (its `tokenizer.model` holds the infilling
tokens) with Llama 2's `[INST]` chat format, which CodeLlama-Instruct uses."""

from __future__ import annotations

from pathlib import Path

from ftune.models.llama2._tokenizer import llama2_tokenizer
from ftune.tokenizers.sentencepiece import SentencePieceTokenizer


def code_llama2_tokenizer(path: str | Path, max_seq_len: int | None = None) -> SentencePieceTokenizer:
    """The Code Llama tokenizer from its sentencepiece `tokenizer.model` (see `llama2_tokenizer`).

    Args:
        path: the `tokenizer.model` file, or a folder holding it.
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.

    Raises:
        FileNotFoundError: no tokenizer.model at `path`.
        ValueError: the file is not a sentencepiece model.
    """
    return llama2_tokenizer(path, max_seq_len=max_seq_len)
