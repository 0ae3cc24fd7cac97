"""What Gemma 1, 2 and 3 build alike: the decoder around the layers, the sandwich layer, layer kinds.

Every Gemma scales its embeddings by sqrt(embed_dim), uses a GeGLU feed-forward and RMSNorms with a
(1 + weight) scale; Gemma 2 and 3 put a norm before *and* after both attention and feed-forward
(the sandwich layer) and alternate local (sliding-window) and global layers, named by HF's
`layer_types`. Each generation's component builder makes its own attention (Gemma 2's soft cap,
Gemma 3's q/k norms and two RoPE bases) and hands it to these.
"""

from collections.abc import Iterable

from torch import nn

from ftune.models._layer_parts import gated_feed_forward
from ftune.modules.geglu import GeGLU
from ftune.modules.gemma_rms_norm import GemmaRMSNorm
from ftune.modules.sandwich_decoder_layer import SandwichDecoderLayer
from ftune.modules.scaled_embedding import ScaledEmbedding
from ftune.modules.transformer import TransformerDecoder

SLIDING, FULL = "sliding_attention", "full_attention"  # HF `layer_types` values


def checked_layer_types(builder: str, layer_types: list[str], num_layers: int) -> list[str]:
    """`layer_types`, checked: one entry a layer, each SLIDING or FULL.

    Raises:
        ValueError: a wrong length or an unknown kind.
    """
    if len(layer_types) != num_layers or set(layer_types) - {SLIDING, FULL}:
        raise ValueError(
            f"{builder}(): layer_types must list {num_layers} entries (num_layers), each {SLIDING!r} or "
            f"{FULL!r}; got {list(layer_types)}."
        )
    return layer_types


def sandwich_layer(
    attn: nn.Module, *, embed_dim: int, intermediate_dim: int, norm_eps: float
) -> SandwichDecoderLayer:
    """Gemma 2/3's layer: `attn` and a fresh GeGLU, each between a norm before it and one after it."""
    return SandwichDecoderLayer(
        attn=attn,
        mlp=gated_feed_forward(GeGLU, embed_dim, intermediate_dim),
        attn_norm=GemmaRMSNorm(embed_dim, norm_eps),
        post_attn_norm=GemmaRMSNorm(embed_dim, norm_eps),
        mlp_norm=GemmaRMSNorm(embed_dim, norm_eps),
        post_mlp_norm=GemmaRMSNorm(embed_dim, norm_eps),
    )


def gemma_decoder(
    *,
    vocab_size: int,
    embed_dim: int,
    norm_eps: float,
    tie_word_embeddings: bool,
    max_seq_len: int,
    layers: Iterable[nn.Module],
    final_logit_softcap: float | None = None,
) -> TransformerDecoder:
    """The decoder around Gemma's layers: scaled embeddings, a final (1 + weight) RMSNorm, tied or own output.

    Args:
        layers: the layers, made as this iterates (a generator): after the embeddings, so that a
            seeded build draws the embeddings' weights first, as it always has.
        final_logit_softcap: cap of the output logits (Gemma 2); None = none.
    """
    return TransformerDecoder(
        tok_embeddings=ScaledEmbedding(vocab_size, embed_dim, scale=embed_dim**0.5),
        layers=nn.ModuleList(layers),
        norm=GemmaRMSNorm(embed_dim, norm_eps),
        output=None if tie_word_embeddings else nn.Linear(embed_dim, vocab_size, bias=False),
        max_seq_len=max_seq_len,
        final_logit_softcap=final_logit_softcap,
    )
