"""Compose your own image-text model, LLaVA-style (Liu et al., 2023): any ftune text decoder, a
SigLIP encoder and a two-layer MLP projector (`LlavaForConditionalGeneration` in transformers, with
a SigLIP `vision_config`, `vision_feature_select_strategy: full`).

Each patch becomes one image token: the projector maps the encoder's output at `feature_layer`
(transformers' `vision_feature_layer`; -1 = the last layer's, before the encoder's final norm, as
transformers takes it) to the decoder's width. Image tokens are attended causally, like text.

    decoder = ftune.models.smollm2.smollm2_135m()
    model = llava(decoder=decoder, image_size=224, patch_size=16, vision_embed_dim=768,
                  vision_num_layers=12, vision_num_heads=12, vision_intermediate_dim=3072,
                  image_token_id=...)  # a token id the tokenizer reserves for images
"""

from ftune.modules.transformer import TransformerDecoder
from ftune.modules.vision.image_text_model import ImageTextModel
from ftune.modules.vision.projectors import MLPProjector
from ftune.modules.vision.siglip import SiglipVisionEncoder


def llava(
    *,
    decoder: TransformerDecoder,
    image_size: int,
    patch_size: int,
    vision_embed_dim: int,
    vision_num_layers: int,
    vision_num_heads: int,
    vision_intermediate_dim: int,
    image_token_id: int,
    vision_norm_eps: float = 1e-6,
    feature_layer: int = -1,
    projector_bias: bool = True,
) -> ImageTextModel:
    """Join `decoder` with a SigLIP encoder through an MLP projector. Argument <- HF config.json key
    in brackets.

    Args:
        decoder: any ftune text decoder (`TransformerDecoder`) [text_config].
        image_size, patch_size: the encoder's square input and patch side [vision_config.image_size,
            vision_config.patch_size].
        vision_embed_dim, vision_num_layers, vision_num_heads, vision_intermediate_dim: the encoder's
            sizes [vision_config.hidden_size, num_hidden_layers, num_attention_heads, intermediate_size].
        image_token_id: the placeholder id; (image_size / patch_size)² of them an image [image_token_index].
        vision_norm_eps: the encoder's LayerNorm epsilon [vision_config.layer_norm_eps].
        feature_layer: the encoder output the projector reads, an index into (embeddings, layer 1,
            ..., layer n) [vision_feature_layer].
        projector_bias: biases in the projector [multimodal_projector_bias].

    Raises:
        ValueError: sizes that do not fit, or a `feature_layer` out of range.
    """
    encoder = SiglipVisionEncoder(
        image_size=image_size,
        patch_size=patch_size,
        embed_dim=vision_embed_dim,
        num_layers=vision_num_layers,
        num_heads=vision_num_heads,
        intermediate_dim=vision_intermediate_dim,
        norm_eps=vision_norm_eps,
    )
    if not -(vision_num_layers + 1) <= feature_layer <= vision_num_layers:
        raise ValueError(
            f"llava(): feature_layer {feature_layer} is out of range for {vision_num_layers} encoder layers; "
            f"give an index in [{-(vision_num_layers + 1)}, {vision_num_layers}] (-1 = the last layer)."
        )
    projector = MLPProjector(
        vision_dim=vision_embed_dim,
        text_dim=decoder.tok_embeddings.weight.shape[1],
        num_patches=encoder.num_patches,
        bias=projector_bias,
    )
    return ImageTextModel(
        vision_encoder=encoder,
        projector=projector,
        decoder=decoder,
        image_token_id=image_token_id,
        feature_layer=feature_layer,
    )
