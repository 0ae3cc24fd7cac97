"""Llama 3.2 Vision's image transform: tiling into up to `max_image_tiles` tiles by the best-fit canvas.

Equal to transformers' non-fast MllamaImageProcessor: choose the tile arrangement (w x h tiles, w * h <=
max_image_tiles) whose canvas needs the smallest upscale (else the least downscale; ties: the smallest
canvas), resize the image to fit it keeping its aspect ratio (BILINEAR), pad right and bottom with
zeros to the canvas, rescale and normalise (so padding becomes ``-mean / std``), cut into tiles row by
row, and pad with all-zero tiles to `max_image_tiles`. The image stays one ``<|image|>`` token in the
prompt; the language model reads it through cross-attention (`cross_attention_mask`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import torch
from PIL import Image

from ftune.data.image_ops import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, pixels, resample_filter, resize, to_rgb
from ftune.data.image_transforms import ImageInputs


@lru_cache(maxsize=16)
def supported_aspect_ratios(max_image_tiles: int) -> tuple[tuple[int, int], ...]:
    """Every (a, b) tile arrangement with a * b <= max_image_tiles, in the order its id counts (id = index + 1)."""
    n = max_image_tiles
    return tuple((a, b) for a in range(1, n + 1) for b in range(1, n + 1) if a * b <= n)


def optimal_canvas(height: int, width: int, max_image_tiles: int, tile: int) -> tuple[int, int]:
    """The canvas (height, width), a multiple of `tile` on each side, that an image of this size is fit to."""
    canvases = [(a * tile, b * tile) for a, b in supported_aspect_ratios(max_image_tiles)]
    scales = [min(ch / height, cw / width) for ch, cw in canvases]
    up = [s for s in scales if s >= 1]
    chosen = min(up) if up else max(s for s in scales if s < 1)
    best = [c for c, s in zip(canvases, scales) if s == chosen]
    return min(best, key=lambda c: c[0] * c[1])  # the first of the smallest area, as numpy's argmin


def fit_to_canvas(height: int, width: int, canvas_h: int, canvas_w: int, tile: int) -> tuple[int, int]:
    """The image's size inside the canvas: at least a tile, at most the canvas, aspect ratio kept (floored)."""
    target_w = min(max(width, tile), canvas_w)
    target_h = min(max(height, tile), canvas_h)
    scale_h, scale_w = target_h / height, target_w / width
    if scale_w < scale_h:
        return min(math.floor(height * scale_w) or 1, target_h), target_w
    return target_h, min(math.floor(width * scale_h) or 1, target_w)


class MllamaImageTransform:
    """Llama 3.2 Vision's image processor (transformers' MllamaImageProcessor, non-fast).

    Defaults are Llama 3.2 11B/90B Vision's published preprocessor config (560 px tiles, up to 4,
    OpenAI CLIP's mean and std).

    Args:
        tile_size: a tile's side.
        max_image_tiles: the most tiles an image is cut into.
        resample: Pillow filter name or number.
        rescale_factor: pixel scale before normalising.
        image_mean: per-channel mean.
        image_std: per-channel standard deviation.
        image_token: the image's one prompt token.
    """

    placeholder = "<|image|>"

    def __init__(
        self,
        *,
        tile_size: int = 560,
        max_image_tiles: int = 4,
        resample: str | int = "bilinear",
        rescale_factor: float = 1 / 255,
        image_mean: Sequence[float] = OPENAI_CLIP_MEAN,
        image_std: Sequence[float] = OPENAI_CLIP_STD,
        image_token: str = "<|image|>",
    ) -> None:
        if max_image_tiles <= 0:
            raise ValueError(
                f"MllamaImageTransform: max_image_tiles={max_image_tiles}; it must be a positive int (4 for Llama 3.2 Vision)."
            )
        self.tile, self.max_tiles = tile_size, max_image_tiles
        self.resample = resample_filter(resample, "MllamaImageTransform")
        self.scale, self.mean, self.std = rescale_factor, tuple(image_mean), tuple(image_std)
        self.placeholder = image_token
        self.image_token_strings = (image_token,)  # the ids the labels always ignore

    def sample_inputs(
        self, tokens: Sequence[int], images: Sequence[ImageInputs], image_token_id: int
    ) -> dict[str, torch.Tensor]:
        """A sample's inputs beyond its images: which tiles each token attends to (`cross_attention_mask`)."""
        num_tiles = [int(x.extra["aspect_ratio_mask"].sum()) for x in images]
        return {
            "cross_attention_mask": cross_attention_mask(tokens, image_token_id, num_tiles, self.max_tiles)
        }

    def __call__(self, image: Image.Image) -> ImageInputs:
        rgb = to_rgb(image)
        width, height = rgb.size
        tile = self.tile
        canvas_h, canvas_w = optimal_canvas(height, width, self.max_tiles, tile)
        rows, cols = canvas_h // tile, canvas_w // tile
        fitted = resize(rgb, *fit_to_canvas(height, width, canvas_h, canvas_w, tile), self.resample)
        canvas = Image.new(
            "RGB", (canvas_w, canvas_h)
        )  # black: padding is 0 before rescaling, as in transformers
        canvas.paste(fitted, (0, 0))
        values = pixels(canvas, self.scale, self.mean, self.std)  # (3, rows * tile, cols * tile)
        tiles = (
            values.view(3, rows, tile, cols, tile).permute(1, 3, 0, 2, 4).reshape(rows * cols, 3, tile, tile)
        )
        out = torch.zeros(self.max_tiles, 3, tile, tile)  # (max_tiles, 3, tile, tile), unused tiles zero
        out[: rows * cols] = tiles
        ratio_id = supported_aspect_ratios(self.max_tiles).index((rows, cols)) + 1
        mask = torch.zeros(1, self.max_tiles, dtype=torch.long)
        mask[0, : max(rows * cols, 1)] = 1
        extra = {"aspect_ratio_ids": torch.tensor([ratio_id]), "aspect_ratio_mask": mask}
        return ImageInputs(out[None], self.placeholder, extra)  # pixel_values (1, max_tiles, 3, tile, tile)


def cross_attention_mask(
    tokens: Sequence[int], image_token_id: int, num_tiles: Sequence[int], max_tiles: int
) -> torch.Tensor:
    """Which tiles each text token attends to, as transformers' MllamaProcessor builds it for one sample.

    A token attends to the tiles of the last image token at or before it; consecutive image tokens form
    a group that attends together up to the next group; tokens before the first image attend to none.

    Args:
        tokens: the sample's token ids.
        image_token_id: the ``<|image|>`` id.
        num_tiles: each image's tile count, in order.
        max_tiles: tiles per image slot.

    Returns:
        (len(tokens), len(num_tiles), max_tiles) long.
    """
    at = [i for i, t in enumerate(tokens) if t == image_token_id]
    length = len(tokens)
    mask = torch.zeros(length, len(num_tiles), max_tiles, dtype=torch.long)
    spans = [[a, b] for a, b in zip(at, at[1:] + [length])]
    end = length
    for span in reversed(spans):  # an image token right before the next attends as far as that one does
        if span[0] == span[1] - 1:
            span[1] = end
        end = span[1]
    for j, ((start, stop), n) in enumerate(zip(spans, num_tiles)):
        mask[start:stop, j, :n] = 1
    return mask
