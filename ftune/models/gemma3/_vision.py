"""Gemma 3 image-text (4B, 12B, 27B: Gemma3ForConditionalGeneration): component and model builders.

A SigLIP encoder (So400m: 27 layers of width 1152, 896 x 896 images in 14 x 14 patches, a 64 x 64
grid), Gemma 3's projector (average-pooled to 16 x 16 = 256 tokens, a (1 + weight) RMSNorm, a
bias-free projection) and the Gemma 3 text decoder; an image's 256 tokens attend to each other both
ways, on top of the causal mask (and, in local layers, the sliding window), as in transformers 5.24.
"""

from ftune.models.gemma3._model_builders import gemma3_4b, gemma3_12b, gemma3_27b
from ftune.modules.transformer import TransformerDecoder
from ftune.modules.vision.image_text_model import ImageTextModel
from ftune.modules.vision.projectors import Gemma3Projector
from ftune.modules.vision.siglip import SiglipVisionEncoder

# google/gemma-3-{4b,12b,27b}-* config.json: vision_config, mm_tokens_per_image, image_token_index.
SO400M = dict(
    image_size=896, patch_size=14, embed_dim=1152, num_layers=27, num_heads=16, intermediate_dim=4304
)
TOKENS_PER_IMAGE = 256
IMAGE_TOKEN_ID = 262_144


def gemma3_image_text(
    *,
    decoder: TransformerDecoder,
    image_size: int,
    patch_size: int,
    vision_embed_dim: int,
    vision_num_layers: int,
    vision_num_heads: int,
    vision_intermediate_dim: int,
    vision_norm_eps: float = 1e-6,
    tokens_per_image: int = TOKENS_PER_IMAGE,
    image_token_id: int = IMAGE_TOKEN_ID,
) -> ImageTextModel:
    """Join a Gemma 3 text decoder with a SigLIP encoder through Gemma 3's projector. Argument <- HF
    config.json key in brackets.

    Args:
        decoder: the text decoder (`ftune.models.gemma3.gemma3`) [text_config].
        image_size, patch_size: the encoder's square input and patch side [vision_config.image_size,
            vision_config.patch_size].
        vision_embed_dim, vision_num_layers, vision_num_heads, vision_intermediate_dim: the encoder's
            sizes [vision_config.hidden_size, num_hidden_layers, num_attention_heads, intermediate_size].
        vision_norm_eps: the encoder's and projector's norm epsilon [vision_config.layer_norm_eps].
        tokens_per_image: image tokens after pooling, a square [mm_tokens_per_image].
        image_token_id: the placeholder id [image_token_index].

    Raises:
        ValueError: sizes that do not fit (see `SiglipVisionEncoder`, `Gemma3Projector`).
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
    projector = Gemma3Projector(
        vision_dim=vision_embed_dim,
        text_dim=decoder.tok_embeddings.weight.shape[1],
        patches_per_side=encoder.patches_per_side,
        tokens_per_image=tokens_per_image,
        norm_eps=vision_norm_eps,
    )
    return ImageTextModel(
        vision_encoder=encoder,
        projector=projector,
        decoder=decoder,
        image_token_id=image_token_id,
        bidirectional_images=True,
    )


def _published(decoder: TransformerDecoder) -> ImageTextModel:
    s = SO400M
    return gemma3_image_text(
        decoder=decoder,
        image_size=s["image_size"],
        patch_size=s["patch_size"],
        vision_embed_dim=s["embed_dim"],
        vision_num_layers=s["num_layers"],
        vision_num_heads=s["num_heads"],
        vision_intermediate_dim=s["intermediate_dim"],
    )


def gemma3_vision_4b() -> ImageTextModel:
    """Gemma 3 4B (image-text), with the sizes of its published config.json."""
    return _published(gemma3_4b())


def gemma3_vision_12b() -> ImageTextModel:
    """Gemma 3 12B (image-text), with the sizes of its published config.json."""
    return _published(gemma3_12b())


def gemma3_vision_27b() -> ImageTextModel:
    """Gemma 3 27B (image-text), with the sizes of its published config.json."""
    return _published(gemma3_27b())
