"""Llama 3.2 Vision tokenizer: Llama 3's, with `<|image|>` as one more special token (id 128256 in the
released vocabulary: after the 256 of the text models), as Meta's and torchtune's vision tokenizers."""

from __future__ import annotations

from pathlib import Path

from ftune.models.llama3._tokenizer import _FILES, LLAMA3_PATTERN, LLAMA3_SPECIAL_TOKENS
from ftune.tokenizers.files import find_tokenizer_file
from ftune.tokenizers.formats import Llama3Format
from ftune.tokenizers.tiktoken import TiktokenTokenizer

IMAGE_TOKEN = "<|image|>"


def llama3_2_vision_tokenizer(path: str | Path, max_seq_len: int | None = None) -> TiktokenTokenizer:
    """The Llama 3.2 Vision tokenizer from Meta's `tokenizer.model` (a tiktoken ranks file).

    Args:
        path: the `tokenizer.model` file, or a folder holding it (directly or in `original/`).
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.

    Returns:
        `ftune.models.llama3.llama3_tokenizer`'s tokenizer with `<|image|>` after its special tokens.

    Raises:
        FileNotFoundError: no tokenizer.model at `path`.
        ValueError: the file is not a tiktoken ranks file.
    """
    return TiktokenTokenizer(
        find_tokenizer_file(path, _FILES, who="llama3_2_vision_tokenizer"),
        pattern=LLAMA3_PATTERN,
        special_tokens=[*LLAMA3_SPECIAL_TOKENS, IMAGE_TOKEN],
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|finetune_right_pad_id|>",
        stop_tokens=["<|eom_id|>", "<|eot_id|>"],
        prompt_format=Llama3Format(),
        max_seq_len=max_seq_len,
        name="llama3_2_vision",
    )
