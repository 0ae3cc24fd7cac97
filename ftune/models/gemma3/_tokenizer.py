"""Gemma 3 tokenizer: its HF `tokenizer.json` and chat template (`<start_of_turn>` turns)."""

from __future__ import annotations

from pathlib import Path

from ftune.tokenizers.hf import HFTokenizer


def gemma3_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The Gemma 3 tokenizer from its `tokenizer.json` + `tokenizer_config.json`.

    Gemma's chat template (tokenizer_config.json or chat_template.jinja) lays a conversation out
    as `<bos><start_of_turn>user\\n...<end_of_turn>\\n<start_of_turn>model\\n...`, with the system
    prompt folded into the first user turn; `tokenize_messages` renders it as transformers'
    `apply_chat_template` does.

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
