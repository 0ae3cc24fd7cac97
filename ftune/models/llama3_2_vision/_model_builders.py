"""Llama 3.2 Vision model builders: the published sizes (11B, 90B) and a tiny one for tests.

The sizes are those of the published config.json files (meta-llama/Llama-3.2-11B-Vision and
-90B-Vision, the same for their -Instruct variants); transformers' MllamaForConditionalGeneration
built from them has the parameter counts these builders have (`tests/models/test_llama3_2_vision.py`).
"""

from ftune.models.llama3_2_vision._component_builders import llama3_2_vision
from ftune.modules.cross_attention_layer import CrossAttentionLayer
from ftune.modules.vision.cross_attention_model import CrossAttentionImageTextModel

# The vision encoder is the same in both sizes (ViT-H/14 on 560 px tiles, up to 4 tiles).
_VISION = {
    "image_size": 560,
    "patch_size": 14,
    "vision_embed_dim": 1280,
    "vision_num_layers": 32,
    "vision_num_global_layers": 8,
    "vision_num_heads": 16,
    "vision_intermediate_dim": 5120,
    "vision_intermediate_layers": [3, 7, 15, 23, 30],
    "max_num_tiles": 4,
}


def trainable_parts(
    model: CrossAttentionImageTextModel, *, decoder: bool, encoder: bool, fusion: bool
) -> CrossAttentionImageTextModel:
    """Freeze the parts torchtune's Llama 3.2 Vision builders freeze (their `*_trainable` arguments):
    the decoder (its self-attention layers, embeddings, norm and output), the encoder (but its global
    transformer) and the fusion parts (cross-attention layers, global transformer, projector)."""
    fusion_modules = [
        *(layer for layer in model.decoder.layers if isinstance(layer, CrossAttentionLayer)),
        model.vision_encoder.global_transformer,
        model.projector,
    ]
    model.decoder.requires_grad_(decoder)
    model.vision_encoder.requires_grad_(encoder)
    for module in fusion_modules:
        module.requires_grad_(fusion)
    return model


def llama3_2_vision_11b(
    decoder_trainable: bool = True, encoder_trainable: bool = True, fusion_trainable: bool = True
) -> CrossAttentionImageTextModel:
    """Llama-3.2-11B-Vision(-Instruct): 40 decoder layers of which 8 cross-attend (3, 8, ..., 38).

    Args:
        decoder_trainable, encoder_trainable, fusion_trainable: which parts train in a full fine-tune,
            as torchtune's builder takes them (`trainable_parts`); all by default.
    """
    model = llama3_2_vision(
        vocab_size=128_256,
        num_layers=40,
        num_heads=32,
        num_kv_heads=8,
        embed_dim=4096,
        intermediate_dim=14_336,
        max_seq_len=131_072,
        cross_attention_layers=list(range(3, 40, 5)),
        **_VISION,
    )
    return trainable_parts(
        model, decoder=decoder_trainable, encoder=encoder_trainable, fusion=fusion_trainable
    )


def llama3_2_vision_90b(
    decoder_trainable: bool = True, encoder_trainable: bool = True, fusion_trainable: bool = True
) -> CrossAttentionImageTextModel:
    """Llama-3.2-90B-Vision(-Instruct): 100 decoder layers of which 20 cross-attend (3, 8, ..., 98).

    Args:
        decoder_trainable, encoder_trainable, fusion_trainable: as in `llama3_2_vision_11b`.
    """
    model = llama3_2_vision(
        vocab_size=128_256,
        num_layers=100,
        num_heads=64,
        num_kv_heads=8,
        embed_dim=8192,
        intermediate_dim=28_672,
        max_seq_len=131_072,
        cross_attention_layers=list(range(3, 100, 5)),
        **_VISION,
    )
    return trainable_parts(
        model, decoder=decoder_trainable, encoder=encoder_trainable, fusion=fusion_trainable
    )


def llama3_2_vision_tiny() -> CrossAttentionImageTextModel:
    """5 decoder layers (width 32, vocabulary 64, cross-attention at 1 and 3) and a 4 + 2 layer encoder
    (8 x 8 tiles in 4 x 4 patches, up to 4 tiles; image token 64) for tests; not a published model."""
    return llama3_2_vision(
        vocab_size=64,
        num_layers=5,
        num_heads=4,
        num_kv_heads=2,
        embed_dim=32,
        intermediate_dim=48,
        max_seq_len=256,
        cross_attention_layers=[1, 3],
        image_size=8,
        patch_size=4,
        vision_embed_dim=16,
        vision_num_layers=4,
        vision_num_global_layers=2,
        vision_num_heads=2,
        vision_intermediate_dim=24,
        vision_intermediate_layers=[1, 3],
        image_token_id=64,
        original_max_seq_len=64,
    )
