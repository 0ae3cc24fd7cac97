"""A fresh SigLIP encoder starts as transformers starts one, so that its output depends on the pixels.

With PyTorch's default initialisation the position embeddings (N(0, 1)) swamped the patches' content:
a model composed with a random encoder (`ftune.models.llava`) then learned the answers' prior and
not the images (benchmarks/vision_demo.py). `SiglipVisionEncoder.reset_parameters` follows
transformers' `SiglipPreTrainedModel._init_weights`.
"""

import pytest
import torch
from torch import nn

from ftune.datasets.image_task import Layout, draw
from ftune.modules.vision import SiglipVisionEncoder

SIZES = dict(image_size=48, patch_size=16, embed_dim=192, num_layers=2, num_heads=3, intermediate_dim=768)


def encoder() -> SiglipVisionEncoder:
    torch.manual_seed(0)
    return SiglipVisionEncoder(**SIZES)


def test_each_tensor_has_the_spread_transformers_gives_it() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.SiglipVisionConfig(
        image_size=48, patch_size=16, hidden_size=192, num_hidden_layers=2, num_attention_heads=3,
        intermediate_size=768,
    )  # fmt: skip
    torch.manual_seed(0)
    theirs = dict(transformers.SiglipVisionModel(config).named_parameters())
    ours = dict(encoder().named_parameters())
    pairs = {
        "position_embedding.weight": "embeddings.position_embedding.weight",
        "patch_embedding.weight": "embeddings.patch_embedding.weight",
        "patch_embedding.bias": "embeddings.patch_embedding.bias",
        "layers.1.self_attn.q_proj.weight": "encoder.layers.1.self_attn.q_proj.weight",
        "layers.1.self_attn.out_proj.bias": "encoder.layers.1.self_attn.out_proj.bias",
        "layers.0.mlp.fc1.weight": "encoder.layers.0.mlp.fc1.weight",
        "layers.0.mlp.fc2.bias": "encoder.layers.0.mlp.fc2.bias",
        "layers.0.layer_norm1.weight": "encoder.layers.0.layer_norm1.weight",
        "post_layernorm.bias": "post_layernorm.bias",
    }
    for mine, hf in pairs.items():
        a, b = ours[mine].detach(), theirs[hf].detach()
        assert a.shape == b.shape, mine
        assert abs(float(a.mean() - b.mean())) < 0.02, mine
        assert float(a.std()) == pytest.approx(float(b.std()), rel=0.1, abs=1e-7), mine


def spread_share(model: nn.Module) -> float:
    """How much of the output's spread is between images: mean over features of the std across images,
    over the std of everything (0 = the same output for every image)."""
    images = [draw(Layout("colour", colour, kind, ((r, c),)), 48) for colour in ("red", "blue") for kind in ("circle", "square") for r, c in ((0, 0), (1, 2))]  # fmt: skip
    pixels = torch.stack(
        [
            torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).view(48, 48, 3).permute(2, 0, 1)
            for im in images
        ]
    )
    pixels = (pixels.float() / 255 - 0.5) / 0.5  # (8, 3, 48, 48), as LlavaImageTransform normalises
    with torch.no_grad():
        out = model(pixels, feature_layer=-1)  # (8, 9, 192)
    return float(out.std(0).mean() / out.std())


def test_a_fresh_encoder_sees_the_pixels() -> None:
    # About half the output's spread is between images (PyTorch's defaults gave 0.04).
    assert spread_share(encoder()) > 0.3
