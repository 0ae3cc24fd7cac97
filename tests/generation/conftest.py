"""A tiny seeded llama3 for the generation tests."""

from collections.abc import Callable

import pytest
import torch

from ftune.models.llama3 import llama3
from ftune.modules.transformer import TransformerDecoder

VOCAB = 64


def build_tiny(seed: int = 0, max_seq_len: int = 64) -> TransformerDecoder:
    torch.manual_seed(seed)
    model = llama3(
        vocab_size=VOCAB,
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
def build_model() -> Callable[..., TransformerDecoder]:
    return build_tiny
