"""SmolVLM model builders: a tiny one for tests and demos (the published sizes build from their
config.json: `ftune.models.image_text_model_from_hf_config`)."""

from ftune.models.smollm2 import smollm2
from ftune.models.smolvlm._component_builders import smolvlm
from ftune.modules.vision.image_text_model import ImageTextModel


def smolvlm_tiny() -> ImageTextModel:
    """A 2-layer SmolLM2 decoder (width 32, vocabulary 64) and a 2-layer SigLIP encoder (16 x 16 images
    in 4 x 4 patches, pixel-shuffled by 2: 4 tokens an image, id 63) for tests and demos; not a
    published model."""
    decoder = smollm2(
        vocab_size=64,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        embed_dim=32,
        intermediate_dim=48,
        max_seq_len=64,
    )
    return smolvlm(
        decoder=decoder,
        image_size=16,
        patch_size=4,
        vision_embed_dim=16,
        vision_num_layers=2,
        vision_num_heads=2,
        vision_intermediate_dim=24,
        scale_factor=2,
        image_token_id=63,
    )
