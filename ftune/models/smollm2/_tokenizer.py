"""SmolLM2 tokenizer: its HF `tokenizer.json` and chat template (ChatML with a default system prompt)."""

from __future__ import annotations

from pathlib import Path

from ftune.models._hf_tokenizer import hf_family_tokenizer
from ftune.tokenizers.hf import HFTokenizer


def smollm2_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The SmolLM2 tokenizer: its byte-level BPE and ChatML chat template, with a default system
    prompt.

    Arguments, result and errors: `ftune.models._hf_tokenizer.hf_family_tokenizer`.
    """
    return hf_family_tokenizer(path, max_seq_len)
