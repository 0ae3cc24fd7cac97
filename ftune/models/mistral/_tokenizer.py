"""Mistral tokenizer: sentencepiece `tokenizer.model` (v1 vocabulary) with the `[INST]` format."""

from __future__ import annotations

from pathlib import Path

from ftune.tokenizers.files import find_tokenizer_file
from ftune.tokenizers.formats import MistralFormat
from ftune.tokenizers.sentencepiece import SentencePieceTokenizer


def mistral_tokenizer(path: str | Path, max_seq_len: int | None = None) -> SentencePieceTokenizer:
    """The Mistral 7B tokenizer from its sentencepiece `tokenizer.model`.

    Args:
        path: the `tokenizer.model` file, or a folder holding it.
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.

    Returns:
        A SentencePieceTokenizer whose `tokenize_messages` uses `MistralFormat`:
        `<s>[INST] user [/INST] answer</s>[INST] ...`. For the v3 vocabulary, whose `[INST]`
        is a control token, use `ftune.tokenizers.hf.HFTokenizer` with the model's tokenizer.json.

    Raises:
        FileNotFoundError: no tokenizer.model at `path`.
        ValueError: the file is not a sentencepiece model.
    """
    file = find_tokenizer_file(path, ("tokenizer.model",), who="mistral_tokenizer")
    return SentencePieceTokenizer(file, prompt_format=MistralFormat(), max_seq_len=max_seq_len)
