"""Gemma 2 tokenizer: the first Gemma's (the same 256,000-piece `tokenizer.json` and turn format)."""

from __future__ import annotations

from pathlib import Path

from ftune.models.gemma._tokenizer import gemma_tokenizer
from ftune.tokenizers.hf import HFTokenizer


def gemma2_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The Gemma 2 tokenizer: `ftune.models.gemma.gemma_tokenizer` (Gemma 2 ships Gemma's vocabulary
    and `<start_of_turn>` chat template), under the family's name for configs.

    Args:
        path: the `tokenizer.json` file, the folder holding it with `tokenizer_config.json`, or the
            folder's `tokenizer.model` (torchtune's configs name that one).
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.

    Returns:
        An HFTokenizer whose ids equal transformers' AutoTokenizer's.

    Raises:
        FileNotFoundError: no tokenizer.json at `path` (or beside its tokenizer.model).
        ValueError: unreadable files, or no EOS token in the config.
    """
    return gemma_tokenizer(path, max_seq_len=max_seq_len)
