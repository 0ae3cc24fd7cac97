"""Phi-4 tokenizer: its HF `tokenizer.json` (byte-level BPE, tiktoken's cl100k pieces) and chat template."""

from __future__ import annotations

from pathlib import Path

from ftune.models._hf_tokenizer import hf_family_tokenizer
from ftune.tokenizers.hf import HFTokenizer


def phi4_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The Phi-4 tokenizer: byte-level BPE (tiktoken's cl100k pieces) and the
    `<|im_start|>user<|im_sep|>...<|im_end|>` chat template. A path to the folder's `vocab.json`
    (torchtune's configs name it) reads the `tokenizer.json` beside it.

    Arguments, result and errors: `ftune.models._hf_tokenizer.hf_family_tokenizer`.
    """
    return hf_family_tokenizer(path, max_seq_len, beside="vocab.json")
