"""Per-family image transforms: a PIL image -> the pixel values the vision tower reads and the prompt text
the image stands for, equal to transformers' non-fast image processor and processor of that family.

Each transform has a `placeholder` (what the family's chat template writes for an image part:
Gemma 3 ``<start_of_image>``, Idefics3/SmolVLM and LLaVA-style ``<image>``) and is called on one image; the result's
`text` replaces that placeholder in the prompt (as the processor does) and its `pixel_values` are
the crops or tiles the vision tower encodes, one row a crop/tile, in the order their image tokens
appear in `text`. Llama 3.2 Vision's tiling is in `ftune.data.mllama_image`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from PIL import Image

from ftune.data.image_ops import (
    IMAGENET_STANDARD_MEAN,
    IMAGENET_STANDARD_STD,
    pixels,
    resample_filter,
    resize,
    to_rgb,
)


@dataclass
class ImageInputs:
    """What one image gives the model.

    Args:
        pixel_values: (n, 3, h, w) float32: the crops or tiles of this image the vision tower encodes
            (Llama 3.2 Vision: (max_tiles, 3, h, w), unused tiles zero).
        text: the prompt text the image stands for (its image tokens, laid out as the processor does).
        extra: the family's further per-image inputs (Idefics3: ``pixel_attention_mask`` (n, h, w);
            Llama 3.2 Vision: ``aspect_ratio_ids`` (1,), ``aspect_ratio_mask`` (1, max_tiles)), each with the
            row dimension first, so a batch concatenates them along it.
    """

    pixel_values: torch.Tensor
    text: str
    extra: dict[str, torch.Tensor] = field(default_factory=dict)


class Gemma3ImageTransform:
    """Gemma 3's image processor and its prompt layout (transformers' Gemma3ImageProcessor, non-fast).

    Resize to ``image_size`` squared with `resample`, rescale, normalise; the image stands for
    ``"\\n\\n" + boi + image_token * image_seq_length + eoi + "\\n\\n"`` in the prompt. Defaults are
    Gemma 3 4B/12B/27B's published preprocessor and processor configs (896 px, 256 tokens).

    Args:
        image_size: height and width the image is resized to.
        image_seq_length: image tokens per image (the model's mm_tokens_per_image).
        resample: Pillow filter name or number.
        rescale_factor: pixel scale before normalising.
        image_mean: per-channel mean.
        image_std: per-channel standard deviation.
        do_pan_and_scan: also encode crops of a wide or tall image (Gemma 3's pan and scan); off by
            default, as in Gemma 3's published configs.
        pan_and_scan_min_crop_size: smallest crop side, in pixels.
        pan_and_scan_max_num_crops: most crops an image gets.
        pan_and_scan_min_ratio_to_activate: aspect ratio (long / short side) from which an image is cropped.
    """

    placeholder = "<start_of_image>"

    def __init__(
        self,
        *,
        image_size: int = 896,
        image_seq_length: int = 256,
        resample: str | int = "bilinear",
        rescale_factor: float = 1 / 255,
        image_mean: Sequence[float] = IMAGENET_STANDARD_MEAN,
        image_std: Sequence[float] = IMAGENET_STANDARD_STD,
        do_pan_and_scan: bool = False,
        pan_and_scan_min_crop_size: int = 256,
        pan_and_scan_max_num_crops: int = 4,
        pan_and_scan_min_ratio_to_activate: float = 1.2,
        boi_token: str = "<start_of_image>",
        image_token: str = "<image_soft_token>",
        eoi_token: str = "<end_of_image>",
    ) -> None:
        self.image_size = image_size
        self.resample = resample_filter(resample, "Gemma3ImageTransform")
        self.scale, self.mean, self.std = rescale_factor, tuple(image_mean), tuple(image_std)
        self.do_pan_and_scan = do_pan_and_scan
        self.min_crop, self.max_crops = pan_and_scan_min_crop_size, pan_and_scan_max_num_crops
        self.min_ratio = pan_and_scan_min_ratio_to_activate
        self.placeholder = boi_token
        self.image_token_strings = (boi_token, image_token, eoi_token)  # the ids the labels always ignore
        self.image_sequence = f"\n\n{boi_token}{image_token * image_seq_length}{eoi_token}\n\n"

    def crops(self, image: Image.Image) -> list[Image.Image]:
        """Pan and scan: the crops of a wide or tall image (none when it is not stretched enough)."""
        width, height = image.size
        long, short = max(width, height), min(width, height)
        if long / short < self.min_ratio:
            return []
        n = min(int(math.floor(long / short + 0.5)), int(math.floor(long / self.min_crop)))
        n = min(self.max_crops, max(2, n))
        n_w, n_h = (n, 1) if width >= height else (1, n)
        crop_w, crop_h = int(math.ceil(width / n_w)), int(math.ceil(height / n_h))
        if min(crop_w, crop_h) < self.min_crop:
            return []
        # row-major, each box clipped at the image's edge as a numpy slice is
        return [
            image.crop((x, y, min(x + crop_w, width), min(y + crop_h, height)))
            for y in range(0, crop_h * n_h, crop_h)
            for x in range(0, crop_w * n_w, crop_w)
        ]

    def __call__(self, image: Image.Image) -> ImageInputs:
        rgb = to_rgb(image)
        crops = self.crops(rgb) if self.do_pan_and_scan else []
        size = self.image_size
        rows = [
            pixels(resize(im, size, size, self.resample), self.scale, self.mean, self.std)
            for im in [rgb, *crops]
        ]
        text = self.image_sequence
        if crops:
            text = (
                f"Here is the original image {self.image_sequence} and here are some crops to help you see better "
                + " ".join([self.image_sequence] * len(crops))
            )
        return ImageInputs(torch.stack(rows), text)  # (1 + crops, 3, size, size)


# transformers' Idefics3 caps a resized image's longest side at 4k
_IDEFICS3_MAX_SIDE = 4096


def _longest_edge_size(height: int, width: int, longest: int) -> tuple[int, int]:
    """Idefics3's size for `longest` as the longest side: the other side even, at least 1, then capped at 4k."""
    ratio = width / height
    if width >= height:
        width, height = longest, int(longest / ratio)
        height += height % 2
    else:
        height, width = longest, int(longest * ratio)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    ratio = width / height
    if width >= height and width > _IDEFICS3_MAX_SIDE:
        width, height = _IDEFICS3_MAX_SIDE, int(_IDEFICS3_MAX_SIDE / ratio)
    elif height > width and height > _IDEFICS3_MAX_SIDE:
        height, width = _IDEFICS3_MAX_SIDE, int(_IDEFICS3_MAX_SIDE * ratio)
    return max(height, 1), max(width, 1)


def _tile_multiple_size(height: int, width: int, tile: int) -> tuple[int, int]:
    """Idefics3's size for splitting: each side rounded up to a multiple of the tile, the aspect ratio kept."""
    ratio = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = math.ceil(int(width / ratio) / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = math.ceil(int(height * ratio) / tile) * tile
    return height, width


class Idefics3ImageTransform:
    """Idefics3's image processor and prompt layout, as SmolVLM configures it (transformers' non-fast
    Idefics3ImageProcessor and Idefics3Processor).

    Resize so the longest side is `longest_edge` (LANCZOS), then (splitting on) round each side up to a
    multiple of `tile_size` and cut it into rows x cols tiles plus the whole image resized to one tile
    (the global image); rescale, normalise. In the prompt each tile is ``<fake_token_around_image>
    <row_r_col_c>`` + ``<image>`` * image_seq_len, a row ends with a newline, and the global image is
    ``\\n<fake_token_around_image><global-img>`` + ``<image>`` * image_seq_len + ``<fake_token_around_image>``.
    Every tile is `tile_size` squared, so the pixel attention mask is all ones (transformers pads to the
    largest image of a batch, which is a tile). Defaults are SmolVLM-256M/500M-Instruct's configs.

    Args:
        longest_edge: the longest side after the first resize.
        tile_size: a tile's side (the vision tower's image size).
        image_seq_len: image tokens per tile.
        do_image_splitting: cut into tiles; when False the image is resized to one tile.
        resample: Pillow filter name or number.
        rescale_factor: pixel scale before normalising.
        image_mean: per-channel mean.
        image_std: per-channel standard deviation.
    """

    placeholder = "<image>"
    # the ids the labels always ignore: the image tokens and the tags around them (tiles up to 6 x 6)
    image_token_strings = (
        "<fake_token_around_image>",
        "<image>",
        "<global-img>",
        *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
    )

    def __init__(
        self,
        *,
        longest_edge: int = 2048,
        tile_size: int = 512,
        image_seq_len: int = 64,
        do_image_splitting: bool = True,
        resample: str | int = "lanczos",
        rescale_factor: float = 1 / 255,
        image_mean: Sequence[float] = IMAGENET_STANDARD_MEAN,
        image_std: Sequence[float] = IMAGENET_STANDARD_STD,
    ) -> None:
        self.longest_edge, self.tile, self.image_seq_len = longest_edge, tile_size, image_seq_len
        self.do_image_splitting = do_image_splitting
        self.resample = resample_filter(resample, "Idefics3ImageTransform")
        self.scale, self.mean, self.std = rescale_factor, tuple(image_mean), tuple(image_std)

    def tiles(self, image: Image.Image) -> tuple[list[Image.Image], int, int]:
        """The images the tower encodes (tiles row by row, then the global image) and the rows and cols."""
        width, height = image.size
        image = resize(image, *_longest_edge_size(height, width, self.longest_edge), self.resample)
        tile = self.tile
        if not self.do_image_splitting:
            return [resize(image, tile, tile, self.resample)], 0, 0
        width, height = image.size
        image = resize(image, *_tile_multiple_size(height, width, tile), self.resample)
        width, height = image.size
        if height <= tile and width <= tile:
            return [image], 0, 0
        rows, cols = (height - tile) // tile + 1, (width - tile) // tile + 1
        crops = [
            image.crop((c * tile, r * tile, (c + 1) * tile, (r + 1) * tile))
            for r in range(rows)
            for c in range(cols)
        ]
        return [*crops, resize(image, tile, tile, self.resample)], rows, cols

    def prompt(self, rows: int, cols: int) -> str:
        """The prompt text of an image cut into rows x cols tiles (0 x 0: the global image only)."""
        image_tokens = "<image>" * self.image_seq_len
        global_image = f"<fake_token_around_image><global-img>{image_tokens}<fake_token_around_image>"
        if rows == 0 and cols == 0:
            return global_image
        lines = [
            "".join(f"<fake_token_around_image><row_{r + 1}_col_{c + 1}>{image_tokens}" for c in range(cols))
            + "\n"
            for r in range(rows)
        ]
        return "".join(lines) + "\n" + global_image

    def __call__(self, image: Image.Image) -> ImageInputs:
        tiles, rows, cols = self.tiles(to_rgb(image))
        values = torch.stack(
            [pixels(t, self.scale, self.mean, self.std) for t in tiles]
        )  # (n, 3, tile, tile)
        mask = torch.ones(values.shape[0], *values.shape[2:], dtype=torch.long)  # (n, tile, tile)
        return ImageInputs(values, self.prompt(rows, cols), {"pixel_attention_mask": mask})


class LlavaImageTransform:
    """A LLaVA-style model's image processor and prompt layout, with a SigLIP encoder (transformers'
    non-fast SiglipImageProcessor and LlavaProcessor, ``vision_feature_select_strategy: full``).

    Resize to `image_size` squared (BICUBIC), rescale, normalise; the image stands for one
    `image_token` a patch, ``(image_size // patch_size) ** 2`` of them. The transform of a model composed
    with `ftune.models.llava` (its `image_size`, `patch_size` and the tokenizer's image token).

    Args:
        image_size: height and width the image is resized to (the encoder's input side).
        patch_size: the encoder's patch side.
        image_token: the placeholder token, written once a patch.
        resample: Pillow filter name or number.
        rescale_factor: pixel scale before normalising.
        image_mean: per-channel mean.
        image_std: per-channel standard deviation.
    """

    def __init__(
        self,
        *,
        image_size: int = 224,
        patch_size: int = 16,
        image_token: str = "<image>",
        resample: str | int = "bicubic",
        rescale_factor: float = 1 / 255,
        image_mean: Sequence[float] = IMAGENET_STANDARD_MEAN,
        image_std: Sequence[float] = IMAGENET_STANDARD_STD,
    ) -> None:
        if image_size % patch_size:
            raise ValueError(
                f"LlavaImageTransform: image_size={image_size} is not a multiple of patch_size={patch_size}; use "
                "the encoder's own image_size and patch_size (its config.json's vision_config)."
            )
        self.image_size = image_size
        self.resample = resample_filter(resample, "LlavaImageTransform")
        self.scale, self.mean, self.std = rescale_factor, tuple(image_mean), tuple(image_std)
        self.placeholder = image_token
        self.image_token_strings = (image_token,)  # the ids the labels always ignore
        self.text = image_token * (image_size // patch_size) ** 2

    def __call__(self, image: Image.Image) -> ImageInputs:
        size = self.image_size
        values = pixels(resize(to_rgb(image), size, size, self.resample), self.scale, self.mean, self.std)
        return ImageInputs(values[None], self.text)  # (1, 3, size, size)
