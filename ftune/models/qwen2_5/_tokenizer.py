"""Qwen2.5 tokenizer: its HF `tokenizer.json` and chat template (ChatML with a default system prompt)."""

from __future__ import annotations

from pathlib import Path

from ftune.models._hf_tokenizer import hf_family_tokenizer
from ftune.tokenizers.hf import HFTokenizer


def qwen2_5_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The Qwen2.5 tokenizer: Qwen2's byte-level BPE and ChatML chat template, with a default
    system prompt.

    Arguments, result and errors: `ftune.models._hf_tokenizer.hf_family_tokenizer`.
    """
    return hf_family_tokenizer(path, max_seq_len)
