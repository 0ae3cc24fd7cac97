"""Llama 2 tokenizer: sentencepiece `tokenizer.model` with the `[INST]` chat format."""

from __future__ import annotations

from pathlib import Path

from ftune.tokenizers.files import find_tokenizer_file
from ftune.tokenizers.formats import Llama2Format
from ftune.tokenizers.sentencepiece import SentencePieceTokenizer


def llama2_tokenizer(path: str | Path, max_seq_len: int | None = None) -> SentencePieceTokenizer:
    """The Llama 2 tokenizer from its sentencepiece `tokenizer.model`.

    Args:
        path: the `tokenizer.model` file, or a folder holding it.
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.

    Returns:
        A SentencePieceTokenizer (BOS `<s>`, EOS `</s>`, pad 0) whose `tokenize_messages` uses
        `Llama2Format`: `<s>[INST] <<SYS>>...<</SYS>> user [/INST] answer </s>` per turn.

    Raises:
        FileNotFoundError: no tokenizer.model at `path`.
        ValueError: the file is not a sentencepiece model.
    """
    file = find_tokenizer_file(path, ("tokenizer.model",), who="llama2_tokenizer")
    return SentencePieceTokenizer(file, prompt_format=Llama2Format(), max_seq_len=max_seq_len)
