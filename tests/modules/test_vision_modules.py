"""The vision building blocks on their own: the image-block mask, the decoder's embeddings-in path and
extra mask term, the projectors' shapes, and each argument check's message. (Parity with transformers:
tests/models/test_gemma3_vision.py, test_smolvlm.py, test_llava.py.)"""

import pytest
import torch

from ftune.models.llama3 import llama3
from ftune.modules.masks import image_block_mask
from ftune.modules.vision import Gemma3Projector, MLPProjector, PixelShuffleProjector, SiglipVisionEncoder
from ftune.modules.vision.siglip import VisionAttention


def decoder() -> torch.nn.Module:
    torch.manual_seed(0)
    model = llama3(
        vocab_size=32,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        embed_dim=16,
        intermediate_dim=32,
        max_seq_len=64,
    )
    return model.eval()


def test_image_block_mask_pairs_tokens_of_one_run() -> None:
    is_image = torch.tensor([[False, True, True, False, True, True, True, False]])
    mask = image_block_mask(is_image)[0]
    runs = {(1, 2), (4, 5, 6)}
    expected = torch.zeros(8, 8, dtype=torch.bool)
    for run in runs:
        for i in run:
            for j in run:
                expected[i, j] = True
    assert torch.equal(mask, expected)
    with pytest.raises(
        ValueError,
        match=r"is_image must be a bool tensor of shape \(batch, seq_len\), got torch.int64 \(8,\)",
    ):
        image_block_mask(torch.zeros(8, dtype=torch.long))


def test_embeds_of_the_tokens_give_the_same_output() -> None:
    model, tokens = decoder(), torch.randint(0, 32, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model.hidden(tokens)
        assert torch.equal(model.hidden(tokens, embeds=model.tok_embeddings(tokens)), plain)
        none = torch.zeros(2, 10, 10, dtype=torch.bool)
        assert torch.allclose(model.hidden(tokens, also_attend=none), plain, atol=1e-6)
        # A pair (query 2, key 5) attended on top of causal changes query 2 and what follows, not 0..1.
        extra = none.clone()
        extra[:, 2, 5] = True
        out = model.hidden(tokens, also_attend=extra)
    assert torch.allclose(out[:, :2], plain[:, :2], atol=1e-6) and not torch.allclose(out[:, 2], plain[:, 2])


def test_also_attend_with_the_cache_equals_without() -> None:
    model, tokens = decoder(), torch.randint(0, 32, (2, 12), generator=torch.Generator().manual_seed(2))
    extra = image_block_mask(torch.tensor([[False, True, True, True] + [False] * 8] * 2))
    with torch.no_grad():
        expected = model.hidden(tokens, also_attend=extra)
        model.setup_caches(batch_size=2, max_seq_len=16)
        got = model.hidden(tokens, input_pos=torch.arange(12)[None], also_attend=extra)
        model.delete_caches()
    assert torch.allclose(got, expected, atol=1e-5)


def test_decoder_argument_checks() -> None:
    model, tokens = decoder(), torch.zeros(2, 6, dtype=torch.long)
    with pytest.raises(ValueError, match=r"embeds must have shape \(2, 6, 16\) .*, got \(2, 6, 8\)"):
        model.hidden(tokens, embeds=torch.zeros(2, 6, 8))
    with pytest.raises(
        ValueError,
        match=r"also_attend must be a bool tensor of shape \(2, 6, 6\), got torch.bool \(2, 6, 5\)",
    ):
        model.hidden(tokens, also_attend=torch.zeros(2, 6, 5, dtype=torch.bool))


def test_projector_shapes() -> None:
    features = torch.randn(3, 64, 8)  # 3 images, 8 x 8 patches of width 8
    gemma = Gemma3Projector(vision_dim=8, text_dim=12, patches_per_side=8, tokens_per_image=16, norm_eps=1e-6)
    assert gemma(features).shape == (3, 16, 12)
    shuffle = PixelShuffleProjector(vision_dim=8, text_dim=12, patches_per_side=8, scale_factor=4)
    assert shuffle(features).shape == (3, 4, 12) and shuffle.tokens_per_image == 4
    assert MLPProjector(vision_dim=8, text_dim=12, num_patches=64)(features).shape == (3, 64, 12)
    with pytest.raises(
        ValueError,
        match=r"PixelShuffleProjector: patch features must have shape \(n_images, 64, 8\), got \(3, 16, 8\)",
    ):
        shuffle(features[:, :16])


def test_pixel_shuffle_folds_neighbouring_patches() -> None:
    # Patch (row, col) of a 4 x 4 grid carries the value 10 * row + col; scale 2 folds each 2 x 2 block
    # into one token: token (0, 1) holds patches (0, 2), (0, 3), (1, 2), (1, 3).
    grid = torch.tensor([[10.0 * r + c for c in range(4)] for r in range(4)]).reshape(1, 16, 1)
    shuffle = PixelShuffleProjector(vision_dim=1, text_dim=4, patches_per_side=4, scale_factor=2)
    with torch.no_grad():
        shuffle.proj.weight.copy_(torch.eye(4))
        tokens = shuffle(grid)[0]
    assert tokens[1].tolist() == [2.0, 3.0, 12.0, 13.0]


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: VisionAttention(10, 3), r"embed_dim \(10\) must be divisible by num_heads \(3\)"),
        (
            lambda: SiglipVisionEncoder(
                image_size=30, patch_size=7, embed_dim=8, num_layers=1, num_heads=2, intermediate_dim=8
            ),
            r"image_size \(30\) must be a multiple of patch_size \(7\)",
        ),
        (
            lambda: Gemma3Projector(
                vision_dim=8, text_dim=8, patches_per_side=8, tokens_per_image=8, norm_eps=1e-6
            ),
            r"tokens_per_image \(8\) must be a square whose side divides the patch grid's side \(8\)",
        ),
        (
            lambda: PixelShuffleProjector(vision_dim=8, text_dim=8, patches_per_side=8, scale_factor=3),
            r"scale_factor \(3\) must divide the patch grid's side \(8\)",
        ),
    ],
)
def test_size_checks(build, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build()


def test_encoder_feature_layer_out_of_range() -> None:
    encoder = SiglipVisionEncoder(
        image_size=14, patch_size=7, embed_dim=8, num_layers=2, num_heads=2, intermediate_dim=8
    )
    with pytest.raises(
        ValueError, match=r"feature_layer 3 is out of range for 2 layers; give an index in \[-3, 2\]"
    ):
        encoder(torch.zeros(1, 3, 14, 14), feature_layer=3)
