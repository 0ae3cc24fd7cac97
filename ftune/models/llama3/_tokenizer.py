"""Llama 3 tokenizer: tiktoken ranks (`tokenizer.model`), 256 special tokens, the header prompt format.

Special token ids follow the Llama 3.1 / 3.2 text models (ids 128000-128255 in the released
vocabulary; `len(ranks) + i` in general). Llama 3.0 named some of these ids
`<|reserved_special_token_N|>` instead, but BOS, EOS, the header tokens and `<|eot_id|>`
have the same ids in every Llama 3 release.
"""

from __future__ import annotations

from pathlib import Path

from ftune.tokenizers.files import find_tokenizer_file
from ftune.tokenizers.formats import Llama3Format
from ftune.tokenizers.tiktoken import TiktokenTokenizer

# The pre-tokenizer regex of Llama 3 (cl100k's, with numbers split in groups of 1 to 3 digits).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

NUM_SPECIAL_TOKENS = 256

_NAMED = [
    "<|begin_of_text|>",  # +0  BOS
    "<|end_of_text|>",  # +1  EOS (end of document)
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",  # +4  padding
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",  # +6
    "<|end_header_id|>",  # +7
    "<|eom_id|>",  # +8  end of message (a tool call awaits its result)
    "<|eot_id|>",  # +9  end of turn
    "<|python_tag|>",  # +10 tool-call code follows
]
# The remaining ids are reserved tokens numbered on from 3: <|reserved_special_token_3|> is +11.
LLAMA3_SPECIAL_TOKENS: list[str] = _NAMED + [
    f"<|reserved_special_token_{3 + i}|>" for i in range(NUM_SPECIAL_TOKENS - len(_NAMED))
]

_FILES = ("tokenizer.model", "original/tokenizer.model")


def llama3_tokenizer(path: str | Path, max_seq_len: int | None = None) -> TiktokenTokenizer:
    """The Llama 3 tokenizer from Meta's `tokenizer.model` (a tiktoken ranks file).

    Args:
        path: the `tokenizer.model` file, or a folder holding it (directly or in `original/`,
            as in the Hub's Llama 3 repositories).
        max_seq_len: `tokenize_messages` truncates to this many tokens when set.

    Returns:
        A TiktokenTokenizer with BOS `<|begin_of_text|>`, EOS `<|end_of_text|>`, pad
        `<|finetune_right_pad_id|>`, stop tokens EOS, `<|eom_id|>`, `<|eot_id|>`, and the
        Llama 3 header format for `tokenize_messages`.

    Raises:
        FileNotFoundError: no tokenizer.model at `path`.
        ValueError: the file is not a tiktoken ranks file.
    """
    return TiktokenTokenizer(
        find_tokenizer_file(path, _FILES, who="llama3_tokenizer"),
        pattern=LLAMA3_PATTERN,
        special_tokens=LLAMA3_SPECIAL_TOKENS,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|finetune_right_pad_id|>",
        stop_tokens=["<|eom_id|>", "<|eot_id|>"],
        prompt_format=Llama3Format(),
        max_seq_len=max_seq_len,
        name="llama3",
    )
