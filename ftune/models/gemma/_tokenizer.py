"""Gemma tokenizer: its HF `tokenizer.json` (sentencepiece BPE, 256,000 pieces) and chat template."""

from __future__ import annotations

from pathlib import Path

from ftune.models._hf_tokenizer import hf_family_tokenizer
from ftune.tokenizers.hf import HFTokenizer


def gemma_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The Gemma tokenizer: 256,000 sentencepiece BPE pieces and the `<start_of_turn>user\\n...<end_of_turn>\\n`
    chat template. A path to the folder's `tokenizer.model` (torchtune's configs name it) reads the
    `tokenizer.json` beside it.

    Arguments, result and errors: `ftune.models._hf_tokenizer.hf_family_tokenizer`.
    """
    return hf_family_tokenizer(path, max_seq_len, beside="tokenizer.model")
