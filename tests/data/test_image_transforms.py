"""Pixel values of ftune's image transforms against transformers' non-fast processors (PIL backend), on
23 images drawn with Pillow: every size class (1x1, wide, tall, odd, > 1000 px) and mode (RGB, RGBA, L, LA,
P, P with a transparent colour, CMYK, 1). The bound is exact equality: Pillow does the resizes in both, and
the rescale (float64 product cast to float32) and normalisation (float32) are one IEEE operation an element,
rounded alike by numpy and torch."""

import pytest
import torch
from ftune_tests_vision_assets import drawn_image, drawn_images
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil
from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

from ftune.data import Gemma3ImageTransform, Idefics3ImageTransform, LlavaImageTransform, MllamaImageTransform
from ftune.data.image_ops import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD

IMAGES = drawn_images()
FEW = [IMAGES[i] for i in (0, 9, 10, 19, 21, 22)]  # 1x1, wide, tall, large: for the published sizes (slow)
HALF = {"image_mean": [0.5] * 3, "image_std": [0.5] * 3}


def _equal(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.dtype == theirs.dtype == torch.float32
    assert ours.shape == theirs.shape
    assert torch.equal(ours, theirs), (ours - theirs).abs().max()


def test_there_are_twenty_images_of_every_kind():
    assert len(IMAGES) >= 20
    assert {"RGB", "RGBA", "L", "LA", "P", "CMYK", "1"} <= {im.mode for im in IMAGES}
    assert any(im.info.get("transparency") is not None for im in IMAGES)
    sizes = [im.size for im in IMAGES]
    assert (1, 1) in sizes and any(w >= 4 * h for w, h in sizes) and any(h >= 4 * w for w, h in sizes)


@pytest.mark.parametrize("size", [896, 40])
def test_gemma3_pixels_equal_transformers(size):
    ours = Gemma3ImageTransform(image_size=size)
    theirs = Gemma3ImageProcessorPil(size={"height": size, "width": size}, resample=2, **HALF)
    for image in FEW if size == 896 else IMAGES:
        _equal(ours(image).pixel_values, theirs(image, return_tensors="pt")["pixel_values"])


def test_gemma3_pan_and_scan_equals_transformers():
    kwargs = {
        "pan_and_scan_min_crop_size": 8,
        "pan_and_scan_max_num_crops": 3,
        "pan_and_scan_min_ratio_to_activate": 1.2,
    }
    ours = Gemma3ImageTransform(image_size=24, image_seq_length=2, do_pan_and_scan=True, **kwargs)
    theirs = Gemma3ImageProcessorPil(size={"height": 24, "width": 24}, do_pan_and_scan=True, **kwargs, **HALF)
    crops = []
    for image in IMAGES:
        got, want = ours(image), theirs(image, return_tensors="pt")
        _equal(got.pixel_values, want["pixel_values"])
        crops.append(int(want["num_crops"][0]))
        assert got.pixel_values.shape[0] == 1 + crops[-1]
    assert max(crops) == 3 and min(crops) == 0


@pytest.mark.parametrize(
    ("longest_edge", "tile", "split", "images"),
    [(2048, 512, True, FEW[:3]), (96, 32, True, IMAGES), (96, 32, False, IMAGES)],
    ids=["smolvlm-256m", "small-split", "small-no-split"],
)
def test_idefics3_pixels_and_tiles_equal_transformers(longest_edge, tile, split, images):
    ours = Idefics3ImageTransform(longest_edge=longest_edge, tile_size=tile, do_image_splitting=split)
    theirs = Idefics3ImageProcessorPil(
        size={"longest_edge": longest_edge}, max_image_size={"longest_edge": tile}, do_image_splitting=split,
        resample=1, **HALF,
    )  # fmt: skip
    layouts = set()
    for image in images:
        got = ours(image)
        want = theirs(image, return_tensors="pt", return_row_col_info=True)
        _equal(got.pixel_values, want["pixel_values"][0])
        assert torch.equal(got.extra["pixel_attention_mask"], want["pixel_attention_mask"][0])
        rows, cols = want["rows"][0][0], want["cols"][0][0]
        assert got.text == ours.prompt(rows, cols)
        layouts.add((rows, cols))
    assert len(layouts) >= (1 if not split else 3)


@pytest.mark.parametrize(("tile", "max_tiles"), [(560, 4), (28, 4), (20, 6)])
def test_mllama_tiles_ids_and_mask_equal_transformers(tile, max_tiles):
    ours = MllamaImageTransform(tile_size=tile, max_image_tiles=max_tiles)
    theirs = MllamaImageProcessorPil(
        size={"height": tile, "width": tile}, max_image_tiles=max_tiles, image_mean=list(OPENAI_CLIP_MEAN),
        image_std=list(OPENAI_CLIP_STD),
    )  # fmt: skip
    images = FEW if tile == 560 else IMAGES
    ids = set()
    for image in images:
        got, want = ours(image), theirs(image, return_tensors="pt")
        _equal(got.pixel_values, want["pixel_values"][0])  # (1, max_tiles, 3, tile, tile)
        assert torch.equal(got.extra["aspect_ratio_ids"], want["aspect_ratio_ids"][0])
        assert torch.equal(got.extra["aspect_ratio_mask"], want["aspect_ratio_mask"][0])
        ids.add(int(want["aspect_ratio_ids"][0, 0]))
    assert len(ids) >= 3


@pytest.mark.parametrize("size", [224, 32])
def test_llava_siglip_pixels_equal_transformers(size):
    ours = LlavaImageTransform(image_size=size, patch_size=16)
    theirs = SiglipImageProcessorPil(size={"height": size, "width": size})
    for image in FEW if size == 224 else IMAGES:
        _equal(ours(image).pixel_values, theirs(image, return_tensors="pt")["pixel_values"])


def test_transforms_refuse_bad_settings():
    with pytest.raises(
        ValueError, match=r"resample='cubic' is not a Pillow filter; accepted values are nearest \(0\)"
    ):
        Gemma3ImageTransform(resample="cubic")
    with pytest.raises(ValueError, match="max_image_tiles=0; it must be a positive int"):
        MllamaImageTransform(max_image_tiles=0)
    with pytest.raises(ValueError, match="image_size=100 is not a multiple of patch_size=16"):
        LlavaImageTransform(image_size=100, patch_size=16)


def test_a_transform_reads_the_image_not_the_file_mode():
    """The same pixels as RGB and as RGBA with full opacity give the same values (alpha composited on white)."""
    rgb = drawn_image(33, 17, "RGB", seed=1)
    opaque = rgb.copy()
    opaque.putalpha(255)
    t = Gemma3ImageTransform(image_size=16)
    assert torch.equal(t(rgb).pixel_values, t(opaque).pixel_values)
