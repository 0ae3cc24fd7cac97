"""A tiny seeded llama3, built from an HF-style config so quantized checkpoints can rebuild it."""

from collections.abc import Callable

import pytest
import torch

from ftune.models import model_from_hf_config
from ftune.modules.transformer import TransformerDecoder

HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "vocab_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}


def build_tiny(seed: int = 0, **overrides) -> TransformerDecoder:
    torch.manual_seed(seed)
    _, model = model_from_hf_config({**HF_CONFIG, **overrides})
    return model.eval()


@pytest.fixture
def build_model() -> Callable[..., TransformerDecoder]:
    return build_tiny


@pytest.fixture
def hf_config() -> dict:
    return dict(HF_CONFIG)


@pytest.fixture
def tokens() -> torch.Tensor:
    return torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))
