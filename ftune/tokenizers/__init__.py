"""Tokenizers: sentencepiece, tiktoken and HF tokenizer.json backends, and chat prompt formats.

Every backend implements `Tokenizer` (see `base`); model families build theirs in
`ftune.models.<family>._tokenizer` (e.g. `llama3_tokenizer`), and `HFTokenizer` serves any
model that ships a tokenizer.json.
"""

from ftune.tokenizers.base import MessageTokenizer, Tokenizer
from ftune.tokenizers.formats import ChatMLFormat, Llama2Format, Llama3Format, MistralFormat, PromptFormat
from ftune.tokenizers.hf import HFTokenizer
from ftune.tokenizers.sentencepiece import SentencePieceTokenizer
from ftune.tokenizers.tiktoken import TiktokenTokenizer

__all__ = [
    "ChatMLFormat",
    "HFTokenizer",
    "Llama2Format",
    "Llama3Format",
    "MessageTokenizer",
    "MistralFormat",
    "PromptFormat",
    "SentencePieceTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
]
