"""Mixtral component builder: the architecture, with sizes as arguments.

Mixtral (Mistral AI, 2023-2024): Mistral's attention (GQA with 8 key/value heads, no q/k norm,
an optional sliding window) with every feed-forward replaced by 8 SwiGLU experts of width
`intermediate_size`, 2 chosen per token by a softmax over all 8 router logits whose top-2
probabilities are renormalised to sum to one; no shared expert, no dense layer. Training may
jitter the block's input (`router_jitter_noise`, 0 in the published configs).
"""

from torch import nn

from ftune.models._layer_parts import attention, head_dim_of
from ftune.modules.decoder_layer import DecoderLayer
from ftune.modules.moe import MoEFeedForward, MoETransformerDecoder
from ftune.modules.moe_experts import GroupedExperts
from ftune.modules.moe_router import TopKRouter
from ftune.modules.rms_norm import RMSNorm
from ftune.modules.rope import RotaryEmbedding


def mixtral(
    *,
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    intermediate_dim: int,
    max_seq_len: int,
    num_experts: int = 8,
    top_k: int = 2,
    head_dim: int | None = None,
    aux_loss_coef: float = 0.001,
    jitter_noise: float = 0.0,
    rope_base: float = 1_000_000.0,
    norm_eps: float = 1e-5,
    tie_word_embeddings: bool = False,
    sliding_window: int | None = None,
    experts_backend: str = "grouped_mm",
) -> MoETransformerDecoder:
    """Build a Mixtral decoder. Argument <- HF config.json key in brackets; defaults are
    transformers' `MixtralConfig` defaults, which the published models share.

    Args:
        vocab_size: embedding rows [vocab_size].
        num_layers: decoder layers [num_hidden_layers].
        num_heads: query heads [num_attention_heads].
        num_kv_heads: key/value heads [num_key_value_heads].
        embed_dim: model width [hidden_size].
        intermediate_dim: each expert's SwiGLU width [intermediate_size].
        max_seq_len: trained context length [max_position_embeddings].
        num_experts: experts per layer [num_local_experts].
        top_k: experts per token [num_experts_per_tok].
        head_dim: per-head size [head_dim]; None = embed_dim // num_heads.
        aux_loss_coef: the load-balancing loss's weight a recipe uses, `model.aux_loss_coef`
            [router_aux_loss_coef].
        jitter_noise: training-only multiplicative noise on each MoE block's input
            [router_jitter_noise]; 0 = off.
        rope_base: RoPE theta [rope_theta].
        norm_eps: epsilon of every RMSNorm [rms_norm_eps].
        tie_word_embeddings: output projection reuses the embeddings [tie_word_embeddings].
        sliding_window: positions each query attends to, its own included [sliding_window];
            None = the whole causal context (the published configs).
        experts_backend: how expert products run (`ftune.modules.moe_experts.BACKENDS`).

    Returns:
        An `MoETransformerDecoder` with fresh weights on the current default device and dtype.

    Raises:
        ValueError: if the head counts and widths, the expert counts or the jitter do not fit.
    """
    head_dim = head_dim_of("mixtral", embed_dim=embed_dim, num_heads=num_heads, head_dim=head_dim)
    rope = RotaryEmbedding(head_dim, base=rope_base)  # shared: it holds no parameters

    def layer() -> DecoderLayer:
        attn = attention(
            embed_dim=embed_dim,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rope=rope,
            sliding_window=sliding_window,
        )
        mlp = MoEFeedForward(
            # fp32 mixing weights: transformers weights and sums Mixtral's expert outputs in fp32.
            gate=TopKRouter(
                embed_dim=embed_dim,
                num_experts=num_experts,
                top_k=top_k,
                norm_topk_prob=True,
                fp32_weights=True,
            ),
            experts=GroupedExperts(
                num_experts=num_experts,
                embed_dim=embed_dim,
                hidden_dim=intermediate_dim,
                backend=experts_backend,
            ),
            jitter_noise=jitter_noise,
        )
        return DecoderLayer(
            attn=attn, mlp=mlp, attn_norm=RMSNorm(embed_dim, norm_eps), mlp_norm=RMSNorm(embed_dim, norm_eps)
        )

    return MoETransformerDecoder(
        aux_loss_coef=aux_loss_coef,
        tok_embeddings=nn.Embedding(vocab_size, embed_dim),
        layers=nn.ModuleList(layer() for _ in range(num_layers)),
        norm=RMSNorm(embed_dim, norm_eps),
        output=None if tie_word_embeddings else nn.Linear(embed_dim, vocab_size, bias=False),
        max_seq_len=max_seq_len,
    )
