"""Gemma 3 tokenizer: its HF `tokenizer.json` and chat template (`<start_of_turn>` turns)."""

from __future__ import annotations

from pathlib import Path

from ftune.models._hf_tokenizer import hf_family_tokenizer
from ftune.tokenizers.hf import HFTokenizer


def gemma3_tokenizer(path: str | Path, max_seq_len: int | None = None) -> HFTokenizer:
    """The Gemma 3 tokenizer.

    Gemma's chat template (tokenizer_config.json or chat_template.jinja) lays a conversation out
    as `<bos><start_of_turn>user\\n...<end_of_turn>\\n<start_of_turn>model\\n...`, with the system
    prompt folded into the first user turn; `tokenize_messages` renders it as transformers'
    `apply_chat_template` does.

    Arguments, result and errors: `ftune.models._hf_tokenizer.hf_family_tokenizer`.
    """
    return hf_family_tokenizer(path, max_seq_len)
