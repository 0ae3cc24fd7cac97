"""Fixtures of the checkpointing tests; the tiny-model helpers live in ckpt_tiny_hf.py."""

import pytest
import torch
from ckpt_tiny_hf import VOCAB


@pytest.fixture
def tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
