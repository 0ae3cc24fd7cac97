"""Llama 3.2 Vision (MllamaForConditionalGeneration in transformers) component builder.

Llama 3.2 Vision (Meta, 2024): a Llama 3.1 text decoder with gated cross-attention layers inserted at
fixed indices, reading a tiled ViT-H/14 encoder's features (`TiledVisionEncoder`) through one linear
projector. The embedding table has 8 rows past the vocabulary (the `<|image|>` token is the first);
the output projection covers the vocabulary only and is not tied.
"""

from torch import nn

from ftune.models._layer_parts import gated_feed_forward, head_dim_of
from ftune.models.llama3_1 import llama3_1
from ftune.modules.cross_attention import CrossAttention
from ftune.modules.cross_attention_layer import CrossAttentionLayer
from ftune.modules.feed_forward import SwiGLU
from ftune.modules.rms_norm import RMSNorm
from ftune.modules.vision.cross_attention_model import CrossAttentionImageTextModel
from ftune.modules.vision.projectors import LinearProjector
from ftune.modules.vision.tiled_encoder import TiledVisionEncoder

EXTRA_EMBEDDINGS = 8  # embedding rows past vocab_size (HF MllamaTextModel: vocab_size + 8)


def cross_attention_layer(
    *, embed_dim: int, num_heads: int, num_kv_heads: int, intermediate_dim: int, norm_eps: float
) -> CrossAttentionLayer:
    """One gated cross-attention layer with fresh weights (gates at zero: the identity)."""
    head_dim = head_dim_of("llama3_2_vision", embed_dim=embed_dim, num_heads=num_heads, head_dim=None)
    attn = CrossAttention(
        q_proj=nn.Linear(embed_dim, num_heads * head_dim, bias=False),
        k_proj=nn.Linear(embed_dim, num_kv_heads * head_dim, bias=False),
        v_proj=nn.Linear(embed_dim, num_kv_heads * head_dim, bias=False),
        o_proj=nn.Linear(num_heads * head_dim, embed_dim, bias=False),
        q_norm=RMSNorm(head_dim, norm_eps),
        k_norm=RMSNorm(head_dim, norm_eps),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
    )
    return CrossAttentionLayer(
        attn=attn,
        mlp=gated_feed_forward(SwiGLU, embed_dim, intermediate_dim),
        attn_norm=RMSNorm(embed_dim, norm_eps),
        mlp_norm=RMSNorm(embed_dim, norm_eps),
    )


def llama3_2_vision(
    *,
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    intermediate_dim: int,
    max_seq_len: int,
    cross_attention_layers: list[int],
    image_size: int,
    patch_size: int,
    vision_embed_dim: int,
    vision_num_layers: int,
    vision_num_global_layers: int,
    vision_num_heads: int,
    vision_intermediate_dim: int,
    vision_intermediate_layers: list[int],
    max_num_tiles: int = 4,
    num_aspect_ratios: int = 8,
    image_token_id: int = 128_256,
    rope_base: float = 500_000.0,
    norm_eps: float = 1e-5,
    vision_norm_eps: float = 1e-5,
    scale_factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_seq_len: int = 8192,
) -> CrossAttentionImageTextModel:
    """Build Llama 3.2 Vision. Argument <- HF config.json key in brackets.

    Args:
        vocab_size: output rows; the embedding has 8 more [text_config.vocab_size].
        num_layers: decoder layers, cross-attention ones included [text_config.num_hidden_layers].
        num_heads, num_kv_heads, embed_dim, intermediate_dim: the text sizes [text_config.num_attention_heads,
            num_key_value_heads, hidden_size, intermediate_size].
        max_seq_len: trained context [text_config.max_position_embeddings].
        cross_attention_layers: indices among `num_layers` of the cross-attention layers
            [text_config.cross_attention_layers].
        image_size, patch_size: a tile's side and a patch's [vision_config.image_size, patch_size].
        vision_embed_dim, vision_num_layers, vision_num_global_layers, vision_num_heads,
            vision_intermediate_dim: the encoder's sizes [vision_config.hidden_size, num_hidden_layers,
            num_global_layers, attention_heads, intermediate_size].
        vision_intermediate_layers: local layers whose outputs join the encoder's output
            [vision_config.intermediate_layers_indices].
        max_num_tiles: tiles an image has at most [vision_config.max_num_tiles].
        num_aspect_ratios: tile arrangements [len(vision_config.supported_aspect_ratios)].
        image_token_id: the `<|image|>` id [image_token_index].
        rope_base, scale_factor, low_freq_factor, high_freq_factor, original_max_seq_len: RoPE
            [text_config.rope_parameters].
        norm_eps: the decoder's RMSNorm epsilon [text_config.rms_norm_eps].
        vision_norm_eps: the encoder layers' LayerNorm epsilon [vision_config.norm_eps].

    Raises:
        ValueError: sizes that do not fit, or cross-attention indices out of range or repeated.
    """
    cross = sorted(set(cross_attention_layers))
    if len(cross) != len(cross_attention_layers) or any(not 0 <= i < num_layers for i in cross):
        raise ValueError(
            f"llama3_2_vision(): cross_attention_layers {list(cross_attention_layers)} must be distinct indices in "
            f"[0, {num_layers - 1}] (num_layers counts both kinds; Llama 3.2 11B Vision: [3, 8, ..., 38] of 40)."
        )
    text = llama3_1(
        vocab_size=vocab_size,
        num_layers=num_layers - len(cross),
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        embed_dim=embed_dim,
        intermediate_dim=intermediate_dim,
        max_seq_len=max_seq_len,
        rope_base=rope_base,
        norm_eps=norm_eps,
        scale_factor=scale_factor,
        low_freq_factor=low_freq_factor,
        high_freq_factor=high_freq_factor,
        original_max_seq_len=original_max_seq_len,
    )
    self_layers = iter(text.layers)
    sizes = {"embed_dim": embed_dim, "num_heads": num_heads, "num_kv_heads": num_kv_heads}
    text.layers = nn.ModuleList(
        cross_attention_layer(**sizes, intermediate_dim=intermediate_dim, norm_eps=norm_eps)
        if i in cross
        else next(self_layers)
        for i in range(num_layers)
    )
    text.tok_embeddings = nn.Embedding(vocab_size + EXTRA_EMBEDDINGS, embed_dim)
    encoder = TiledVisionEncoder(
        image_size=image_size,
        patch_size=patch_size,
        embed_dim=vision_embed_dim,
        num_layers=vision_num_layers,
        num_global_layers=vision_num_global_layers,
        num_heads=vision_num_heads,
        intermediate_dim=vision_intermediate_dim,
        max_num_tiles=max_num_tiles,
        num_aspect_ratios=num_aspect_ratios,
        intermediate_layers=vision_intermediate_layers,
        norm_eps=vision_norm_eps,
    )
    return CrossAttentionImageTextModel(
        vision_encoder=encoder,
        projector=LinearProjector(vision_dim=encoder.output_dim, text_dim=embed_dim),
        decoder=text,
        image_token_id=image_token_id,
    )
