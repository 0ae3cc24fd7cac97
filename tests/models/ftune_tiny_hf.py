"""Tiny random `transformers` models, one per ftune family, for parity tests (a helper module,
named uniquely so that it never collides with another test folder's helpers)."""

from typing import Any

import torch

# Every family with the options that make it that family: GQA everywhere, Llama-3.1 scaling
# (with a small original context so that all three frequency bands occur at head_dim 16),
# q/k/v bias for Qwen2, tied embeddings for Llama 3.2 / Qwen2.5 (small) / SmolLM2.
_COMMON = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
_LLAMA3_SCALING = dict(
    rope_type="llama3",
    factor=8.0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=64,
)
TINY_HF: dict[str, tuple[str, dict[str, Any]]] = {
    "llama2": ("llama", dict(rope_theta=10_000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)),
    "llama3": ("llama", dict(rope_theta=500_000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)),
    "llama3_1": (
        "llama",
        dict(
            rope_theta=500_000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, rope_scaling=_LLAMA3_SCALING
        ),
    ),
    "llama3_2": (
        "llama",
        dict(
            rope_theta=500_000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            rope_scaling={**_LLAMA3_SCALING, "factor": 32.0},
        ),
    ),
    "qwen2_5": ("qwen2", dict(rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)),
    "mistral": ("mistral", dict(rope_theta=10_000.0, rms_norm_eps=1e-5, sliding_window=None)),
    "smollm2": ("llama", dict(rope_theta=100_000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)),
}


def build_tiny_hf(family: str, seed: int = 0, **overrides: Any) -> torch.nn.Module:
    """A seeded tiny `transformers` causal LM of `family`, every parameter randomised (norms and
    biases too, which HF initialises to constants), in fp32 eval mode."""
    import transformers

    model_type, options = TINY_HF[family]
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[model_type]
    config = config_cls(**{**_COMMON, **options, **overrides})
    torch.manual_seed(seed)
    model = model_cls(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.1)
    return model
