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
GEMMA3_TINY: dict[str, Any] = dict(
    num_hidden_layers=3,
    head_dim=16,
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    sliding_window=6,
    query_pre_attn_scalar=24,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
    },
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
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
    # Qwen2: Qwen2.5's architecture (the same config.json class); untied like Qwen2-7B and 72B.
    "qwen2": ("qwen2", dict(rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)),
    # Gemma: head_dim 32 != hidden_size / heads (16), as in 7B; multi-query like 2B; tied; the releases'
    # legacy hidden_act "gelu" (read as the tanh GELU).
    "gemma": (
        "gemma",
        dict(
            rope_theta=10_000.0,
            rms_norm_eps=1e-6,
            head_dim=32,
            num_key_value_heads=1,
            hidden_act="gelu",
            tie_word_embeddings=True,
        ),
    ),
    # Phi-3 / Phi-4 (Phi3ForCausalLM): fused qkv_proj and gate_up_proj; Phi-3's sliding window (2047 in
    # the 4k releases) shorter than the test sequences; Phi-4's RoPE base, no window.
    "phi3": (
        "phi3",
        dict(
            rope_theta=10_000.0,
            rms_norm_eps=1e-5,
            sliding_window=24,
            tie_word_embeddings=False,
            pad_token_id=None,
        ),
    ),
    "phi4": (
        "phi3",
        dict(
            rope_theta=250_000.0,
            rms_norm_eps=1e-5,
            sliding_window=None,
            tie_word_embeddings=False,
            pad_token_id=None,
        ),
    ),
    "mistral": ("mistral", dict(rope_theta=10_000.0, rms_norm_eps=1e-5, sliding_window=None)),
    "smollm2": ("llama", dict(rope_theta=100_000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)),
    # Code Llama: Llama 2 with RoPE base 1M.
    "code_llama2": ("llama", dict(rope_theta=1_000_000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)),
    # head_dim 32 != hidden_size / heads (16), as in Qwen3-0.6B; untied like the 8B and larger.
    "qwen3": (
        "qwen3",
        dict(rope_theta=1_000_000.0, rms_norm_eps=1e-6, head_dim=32, tie_word_embeddings=False),
    ),
    # Local, global, local layers; a window shorter than the test sequences; linear RoPE scaling on
    # the global layer (as in 4B+); query_pre_attn_scalar != head_dim (as in 27B).
    "gemma3": ("gemma3_text", GEMMA3_TINY),
    # Local, global, local layers with a window shorter than the test sequences; caps low enough that
    # tanh bends the tiny model's scores and logits; query_pre_attn_scalar != head_dim (as in 27B).
    "gemma2": (
        "gemma2",
        dict(
            num_hidden_layers=3,
            head_dim=16,
            sliding_window=6,
            query_pre_attn_scalar=24,
            attn_logit_softcapping=4.0,
            final_logit_softcapping=3.0,
            rope_theta=10_000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            attn_implementation="eager",
        ),
    ),
    # 8 experts, top 2, renormalised as in the published models; transformers' per-expert loop
    # (its plain modelling code) rather than its default grouped_mm kernel.
    "qwen3_moe": (
        "qwen3_moe",
        dict(
            rope_theta=1_000_000.0,
            rms_norm_eps=1e-6,
            head_dim=32,
            moe_intermediate_size=32,
            num_experts=8,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            experts_implementation="eager",
        ),
    ),
    # Mixtral: 8 experts of width intermediate_size, top 2, always renormalised; a window shorter
    # than the test sequences (the published configs have none); transformers' per-expert loop.
    "mixtral": (
        "mixtral",
        dict(
            rope_theta=1_000_000.0,
            rms_norm_eps=1e-5,
            intermediate_size=32,
            num_local_experts=8,
            num_experts_per_tok=2,
            sliding_window=24,
            experts_implementation="eager",
        ),
    ),
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
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "gemma3_text": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
        "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM),
        "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM),
        "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM),
        "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM),
        "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM),
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


# A tiny SigLIP vision tower for a Gemma 3 image-text model (Gemma3ForConditionalGeneration).
GEMMA3_TINY_VISION: dict[str, Any] = dict(
    model_type="siglip_vision_model",
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=1,
    num_attention_heads=2,
    image_size=28,
    patch_size=14,
)


def build_tiny_gemma3_image_text(seed: int = 0) -> torch.nn.Module:
    """A seeded tiny `Gemma3ForConditionalGeneration` (the layout of Gemma 3 4B/12B/27B): the tiny
    Gemma 3 text decoder of `TINY_HF` plus a tiny vision tower and projector, every parameter
    randomised, fp32, eval mode."""
    import transformers

    text = transformers.Gemma3TextConfig(**{**_COMMON, **GEMMA3_TINY}).to_dict()
    config = transformers.Gemma3Config(
        text_config=text,
        vision_config=GEMMA3_TINY_VISION,
        mm_tokens_per_image=4,
        boi_token_index=125,
        eoi_token_index=126,
        image_token_index=127,
    )
    torch.manual_seed(seed)
    model = transformers.Gemma3ForConditionalGeneration(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.uniform_(0.5, 1.5) if name.endswith("norm.weight") else p.normal_(0.0, 0.1)
    return model
