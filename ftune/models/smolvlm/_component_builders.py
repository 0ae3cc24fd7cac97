"""SmolVLM (Idefics3ForConditionalGeneration in transformers) component builder.

SmolVLM (Hugging Face, 2025) is the Idefics3 architecture at small sizes: a SigLIP encoder, a
connector that pixel-shuffles each `scale_factor` x `scale_factor` block of patches into one token
and projects it with one bias-free linear layer, and a SmolLM2 (llama) text decoder. Image tokens
are attended causally, like text. Its processor splits an image into square tiles of the encoder's
size plus a downscaled whole image; each is one image here.

transformers' Idefics3 encoder also takes images padded inside a larger canvas (a
`pixel_attention_mask`); with full-size images, which the SmolVLM processor gives, its position
ids are the plain patch order, the SigLIP encoder's. ftune takes full-size images only.
"""

from ftune.modules.transformer import TransformerDecoder
from ftune.modules.vision.image_text_model import ImageTextModel
from ftune.modules.vision.projectors import PixelShuffleProjector
from ftune.modules.vision.siglip import SiglipVisionEncoder


def smolvlm(
    *,
    decoder: TransformerDecoder,
    image_size: int,
    patch_size: int,
    vision_embed_dim: int,
    vision_num_layers: int,
    vision_num_heads: int,
    vision_intermediate_dim: int,
    scale_factor: int,
    image_token_id: int,
    vision_norm_eps: float = 1e-6,
) -> ImageTextModel:
    """Join a llama-style text decoder with a SigLIP encoder through Idefics3's pixel-shuffle connector.
    Argument <- HF config.json key in brackets.

    Args:
        decoder: the text decoder (e.g. `ftune.models.smollm2.smollm2`) [text_config].
        image_size, patch_size: the encoder's square input and patch side [vision_config.image_size,
            vision_config.patch_size].
        vision_embed_dim, vision_num_layers, vision_num_heads, vision_intermediate_dim: the encoder's
            sizes [vision_config.hidden_size, num_hidden_layers, num_attention_heads, intermediate_size].
        scale_factor: side of the block of patches folded into one token [scale_factor].
        image_token_id: the placeholder id [image_token_id].
        vision_norm_eps: the encoder's LayerNorm epsilon [vision_config.layer_norm_eps].

    Raises:
        ValueError: sizes that do not fit (see `SiglipVisionEncoder`, `PixelShuffleProjector`).
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
    projector = PixelShuffleProjector(
        vision_dim=vision_embed_dim,
        text_dim=decoder.tok_embeddings.weight.shape[1],
        patches_per_side=encoder.patches_per_side,
        scale_factor=scale_factor,
    )
    return ImageTextModel(
        vision_encoder=encoder, projector=projector, decoder=decoder, image_token_id=image_token_id
    )
