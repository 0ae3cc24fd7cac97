"""Vision building blocks: the SigLIP encoder, projectors, and the image-text model joining them to a
text decoder."""

from ftune.modules.vision.image_text_model import ImageTextModel
from ftune.modules.vision.projectors import Gemma3Projector, MLPProjector, PixelShuffleProjector
from ftune.modules.vision.siglip import SiglipVisionEncoder

__all__ = [
    "Gemma3Projector",
    "ImageTextModel",
    "MLPProjector",
    "PixelShuffleProjector",
    "SiglipVisionEncoder",
]
