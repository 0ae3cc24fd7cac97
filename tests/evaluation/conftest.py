"""A tiny seeded llama3 and a byte-level ChatML tokenizer for the evaluation tests."""

import pytest
import torch

from ftune.models.llama3 import llama3
from ftune.modules.transformer import TransformerDecoder
from ftune.tokenizers.base import MessageTokenizer
from ftune.tokenizers.formats import ChatMLFormat

SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257, "<|endoftext|>": 258}


class ByteTokenizer(MessageTokenizer):
    """One id per UTF-8 byte, plus ChatML's special tokens; no BOS, EOS = <|endoftext|>."""

    def __init__(self) -> None:
        self.bos_id = None
        self.eos_id = SPECIALS["<|endoftext|>"]
        self.pad_id = SPECIALS["<|endoftext|>"]
        self.stop_tokens = [SPECIALS["<|im_end|>"], SPECIALS["<|endoftext|>"]]
        self.vocab_size = 260
        self.max_seq_len = None
        self.prompt_format = ChatMLFormat()

    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        return list(text.encode("utf-8")) + ([self.eos_id] if add_eos else [])

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        specials = {v: k for k, v in SPECIALS.items()}
        out = b""
        for i in ids:
            if i < 256:
                out += bytes([i])
            elif not skip_special_tokens and i in specials:
                out += specials[i].encode()
        return out.decode("utf-8", errors="replace")

    def token_to_id(self, token: str) -> int | None:
        return SPECIALS.get(token)


def build_tiny(seed: int = 0, max_seq_len: int = 256) -> TransformerDecoder:
    torch.manual_seed(seed)
    model = llama3(
        vocab_size=260,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        embed_dim=32,
        intermediate_dim=64,
        max_seq_len=max_seq_len,
    )
    return model.eval()


@pytest.fixture
def model() -> TransformerDecoder:
    return build_tiny()


@pytest.fixture
def tokenizer() -> ByteTokenizer:
    return ByteTokenizer()
