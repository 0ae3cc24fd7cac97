"""Gemma tokenizer: its HF `tokenizer.json` (sentencepiece BPE, 256,000 pieces) and chat template."""

from __future__ import annotations

from pathlib import Path

from ftune.tokenizers.hf import HFTokenizer


def gemma_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The Gemma tokenizer from its `tokenizer.json` + `tokenizer_config.json`.

    The pieces run through the `tokenizers` library itself and conversations through the
    checkpoint's own chat template (`<start_of_turn>user\\n...<end_of_turn>\\n`), so ids equal
    transformers' AutoTokenizer's. torchtune's configs point at the folder's `tokenizer.model`
    (sentencepiece): a path to that file reads the `tokenizer.json` beside it.

    Args:
        path: the `tokenizer.json` file, the folder holding it with `tokenizer_config.json`, or the
            folder's `tokenizer.model`.
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.

    Returns:
        An HFTokenizer: special tokens from the config, `tokenize_messages` through the chat template.

    Raises:
        FileNotFoundError: no tokenizer.json at `path` (or beside its tokenizer.model).
        ValueError: unreadable files, or no EOS token in the config.
    """
    path = Path(path)
    if path.name == "tokenizer.model":
        path = path.parent
    return HFTokenizer(path, max_seq_len=max_seq_len)
