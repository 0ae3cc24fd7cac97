"""Vision building blocks: the SigLIP encoder, Llama 3.2 Vision's tiled encoder, projectors, and the
image-text models joining them to a text decoder (image features as tokens, or read by cross-attention)."""

from ftune.modules.vision.cross_attention_model import CrossAttentionImageTextModel
from ftune.modules.vision.image_text_model import ImageTextModel
from ftune.modules.vision.projectors import Gemma3Projector, MLPProjector, PixelShuffleProjector
from ftune.modules.vision.siglip import SiglipVisionEncoder
from ftune.modules.vision.tiled_encoder import TiledVisionEncoder

__all__ = [
    "CrossAttentionImageTextModel",
    "Gemma3Projector",
    "ImageTextModel",
    "MLPProjector",
    "PixelShuffleProjector",
    "SiglipVisionEncoder",
    "TiledVisionEncoder",
]
