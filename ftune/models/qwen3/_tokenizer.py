"""Qwen3 tokenizer: its HF `tokenizer.json` and chat template (ChatML, with `<think>` blocks)."""

from __future__ import annotations

from pathlib import Path

from ftune.models._hf_tokenizer import hf_family_tokenizer
from ftune.tokenizers.hf import HFTokenizer


def qwen3_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The Qwen3 tokenizer.

    Qwen3's chat template (in tokenizer_config.json) is ChatML with optional `<think>...</think>`
    reasoning blocks; `tokenize_messages` renders it as transformers' `apply_chat_template` does.

    Arguments, result and errors: `ftune.models._hf_tokenizer.hf_family_tokenizer`.
    """
    return hf_family_tokenizer(path, max_seq_len)
