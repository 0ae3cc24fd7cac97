"""Phi-3 component builder: the architecture, with sizes as arguments.

Phi-3 (Microsoft, 2024) is a pre-norm GQA + SwiGLU + RMSNorm + RoPE decoder without biases. Its
Hugging Face weights fuse the query, key and value projections into one `qkv_proj` and the gate and
up projections into one `gate_up_proj`; ftune keeps them apart (`_convert.py` splits and fuses), so
LoRA targets, FSDP wrapping and quantization see the same modules as in every other family. The 4k
releases attend within a sliding window of 2047 positions (config.json `sliding_window`), which
transformers applies and so does ftune.
"""

from ftune.models._llama_style import llama_style_decoder
from ftune.modules.transformer import TransformerDecoder


def phi3(
    *,
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    intermediate_dim: int,
    max_seq_len: int,
    head_dim: int | None = None,
    rope_base: float = 10_000.0,
    norm_eps: float = 1e-5,
    sliding_window: int | None = None,
    tie_word_embeddings: bool = False,
) -> TransformerDecoder:
    """Build a Phi-3 decoder (also Phi-4's). Argument <- HF config.json key in brackets.

    Args:
        vocab_size: embedding rows [vocab_size].
        num_layers: decoder layers [num_hidden_layers].
        num_heads: query heads [num_attention_heads].
        num_kv_heads: key/value heads [num_key_value_heads].
        embed_dim: model width [hidden_size].
        intermediate_dim: feed-forward width [intermediate_size].
        max_seq_len: trained context length [max_position_embeddings].
        head_dim: per-head size [head_dim]; None = embed_dim // num_heads.
        rope_base: RoPE theta [rope_theta].
        norm_eps: RMSNorm epsilon [rms_norm_eps].
        sliding_window: attention window in positions [sliding_window]; None attends to the whole
            causal context.
        tie_word_embeddings: output projection reuses the embeddings [tie_word_embeddings].

    Returns:
        The model with freshly initialised weights, on the current default device and dtype.

    Raises:
        ValueError: if the head counts and widths do not fit together.
    """
    return llama_style_decoder(
        builder="phi3",
        vocab_size=vocab_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        embed_dim=embed_dim,
        intermediate_dim=intermediate_dim,
        max_seq_len=max_seq_len,
        head_dim=head_dim,
        rope_base=rope_base,
        norm_eps=norm_eps,
        tie_word_embeddings=tie_word_embeddings,
        sliding_window=sliding_window,
    )
