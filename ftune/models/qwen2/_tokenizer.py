"""Qwen2 tokenizer: its HF `tokenizer.json` and chat template (ChatML with a default system prompt)."""

from __future__ import annotations

from pathlib import Path

from ftune.tokenizers.hf import HFTokenizer


def qwen2_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The Qwen2 tokenizer from its `tokenizer.json` + `tokenizer_config.json`.

    Qwen2's byte-level BPE (151,643 tokens plus the ChatML specials `<|endoftext|>`,
    `<|im_start|>`, `<|im_end|>`) runs through the `tokenizers` library itself, and conversations
    through the checkpoint's own chat template, so ids equal those of transformers' AutoTokenizer.

    Args:
        path: the `tokenizer.json` file, or the folder holding it with `tokenizer_config.json`
            (e.g. the checkpoint folder).
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.

    Returns:
        An HFTokenizer: special tokens from the config, `tokenize_messages` through the chat template.

    Raises:
        FileNotFoundError: no tokenizer.json at `path`.
        ValueError: unreadable files, or no EOS token in the config.
    """
    return HFTokenizer(path, max_seq_len=max_seq_len)
