"""Qwen3-MoE component builder: the architecture, with sizes as arguments.

Qwen3-MoE (Alibaba, 2025): Qwen3's attention (GQA, q/k norm, head_dim 128) with each feed-forward
replaced by 128 SwiGLU experts of width `moe_intermediate_size`, 8 chosen per token by a softmax
router whose top-k probabilities are renormalised (`norm_topk_prob`); no shared expert. Layers in
`mlp_only_layers` (or off the `decoder_sparse_step` cadence) keep a dense SwiGLU of width
`intermediate_size`; the published models have none.
"""

from torch import nn

from ftune.models._layer_parts import attention, gated_feed_forward, head_dim_of
from ftune.modules.decoder_layer import DecoderLayer
from ftune.modules.feed_forward import SwiGLU
from ftune.modules.moe import MoEFeedForward, MoETransformerDecoder
from ftune.modules.moe_experts import GroupedExperts
from ftune.modules.moe_router import TopKRouter
from ftune.modules.rms_norm import RMSNorm
from ftune.modules.rope import RotaryEmbedding


def qwen3_moe(
    *,
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    intermediate_dim: int,
    moe_intermediate_dim: int,
    num_experts: int,
    top_k: int,
    max_seq_len: int,
    head_dim: int | None = None,
    norm_topk_prob: bool = True,
    aux_loss_coef: float = 0.001,
    mlp_only_layers: tuple[int, ...] = (),
    decoder_sparse_step: int = 1,
    rope_base: float = 1_000_000.0,
    norm_eps: float = 1e-6,
    tie_word_embeddings: bool = False,
    experts_backend: str = "grouped_mm",
) -> MoETransformerDecoder:
    """Build a Qwen3-MoE decoder. Argument <- HF config.json key in brackets.

    Args:
        vocab_size: embedding rows [vocab_size].
        num_layers: decoder layers [num_hidden_layers].
        num_heads: query heads [num_attention_heads].
        num_kv_heads: key/value heads [num_key_value_heads].
        embed_dim: model width [hidden_size].
        intermediate_dim: width of the dense SwiGLU of non-MoE layers [intermediate_size].
        moe_intermediate_dim: each expert's SwiGLU width [moe_intermediate_size].
        num_experts: experts per MoE layer [num_experts].
        top_k: experts per token [num_experts_per_tok].
        max_seq_len: trained context length [max_position_embeddings].
        head_dim: per-head size [head_dim]; None = embed_dim // num_heads.
        norm_topk_prob: renormalise the chosen probabilities to sum to 1 [norm_topk_prob].
        aux_loss_coef: the load-balancing loss's weight a recipe uses, `model.aux_loss_coef`
            [router_aux_loss_coef].
        mlp_only_layers: layer indices with a dense SwiGLU instead of experts [mlp_only_layers].
        decoder_sparse_step: layer i has experts when (i + 1) % step == 0 [decoder_sparse_step].
        rope_base: RoPE theta [rope_theta].
        norm_eps: epsilon of every RMSNorm [rms_norm_eps].
        tie_word_embeddings: output projection reuses the embeddings [tie_word_embeddings].
        experts_backend: how expert products run (`ftune.modules.moe_experts.BACKENDS`).

    Returns:
        An `MoETransformerDecoder` with fresh weights on the current default device and dtype.

    Raises:
        ValueError: if the head counts and widths, or the expert counts, do not fit together.
    """
    head_dim = head_dim_of("qwen3_moe", embed_dim=embed_dim, num_heads=num_heads, head_dim=head_dim)
    if decoder_sparse_step < 1:
        raise ValueError(f"qwen3_moe(): decoder_sparse_step must be >= 1, got {decoder_sparse_step}.")
    rope = RotaryEmbedding(head_dim, base=rope_base)  # shared: it holds no parameters

    def mlp(i: int) -> nn.Module:
        if i in mlp_only_layers or (i + 1) % decoder_sparse_step:
            return gated_feed_forward(SwiGLU, embed_dim, intermediate_dim)
        return MoEFeedForward(
            gate=TopKRouter(
                embed_dim=embed_dim, num_experts=num_experts, top_k=top_k, norm_topk_prob=norm_topk_prob
            ),
            experts=GroupedExperts(
                num_experts=num_experts,
                embed_dim=embed_dim,
                hidden_dim=moe_intermediate_dim,
                backend=experts_backend,
            ),
        )

    def layer(i: int) -> DecoderLayer:
        attn = attention(
            embed_dim=embed_dim,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rope=rope,
            q_norm=RMSNorm(head_dim, norm_eps),
            k_norm=RMSNorm(head_dim, norm_eps),
        )
        return DecoderLayer(
            attn=attn,
            mlp=mlp(i),
            attn_norm=RMSNorm(embed_dim, norm_eps),
            mlp_norm=RMSNorm(embed_dim, norm_eps),
        )

    return MoETransformerDecoder(
        aux_loss_coef=aux_loss_coef,
        tok_embeddings=nn.Embedding(vocab_size, embed_dim),
        layers=nn.ModuleList(layer(i) for i in range(num_layers)),
        norm=RMSNorm(embed_dim, norm_eps),
        output=None if tie_word_embeddings else nn.Linear(embed_dim, vocab_size, bias=False),
        max_seq_len=max_seq_len,
    )
