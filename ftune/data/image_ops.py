"""Pixel operations shared by the image transforms, in the order and dtypes of transformers' PIL backend.

transformers' non-fast image processors (the PIL/NumPy backend) convert to RGB by compositing any
transparency onto white, resize with Pillow on uint8 pixels, then rescale in float64 and cast to
float32, then normalise in float32. Doing the same steps with the same dtypes here (Pillow for the
resize, torch for the arithmetic) gives bit-equal pixel values: every step is either Pillow itself
or one IEEE float operation per element, which numpy and torch round alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import torch
from PIL import Image

# Pillow's resampling filters by the names (and numbers) transformers' configs use.
RESAMPLE: dict[str, int] = {
    "nearest": Image.Resampling.NEAREST,
    "lanczos": Image.Resampling.LANCZOS,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}
IMAGENET_STANDARD_MEAN = (0.5, 0.5, 0.5)
IMAGENET_STANDARD_STD = (0.5, 0.5, 0.5)
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def resample_filter(name: str | int, where: str) -> int:
    """Pillow's filter for `name` ("bilinear", ...) or its number as in a preprocessor_config.json.

    Raises:
        ValueError: an unknown name or number, naming `where` and the accepted values.
    """
    if isinstance(name, int) and not isinstance(name, bool) and name in RESAMPLE.values():
        return name
    if isinstance(name, str) and name.lower() in RESAMPLE:
        return RESAMPLE[name.lower()]
    accepted = ", ".join(f"{k} ({int(v)})" for k, v in RESAMPLE.items())
    raise ValueError(f"{where}: resample={name!r} is not a Pillow filter; accepted values are {accepted}.")


def to_rgb(image: Image.Image) -> Image.Image:
    """`image` as RGB; transparent pixels (an alpha band or a palette transparency) are put on white."""
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def resize(image: Image.Image, height: int, width: int, resample: int) -> Image.Image:
    """Pillow's resize of an RGB image to (height, width) (Pillow returns a copy when the size is unchanged)."""
    return image.resize((width, height), resample=resample)


def to_uint8(image: Image.Image) -> torch.Tensor:
    """An RGB image's pixels as a uint8 tensor.

    Returns:
        (3, h, w) uint8.
    """
    width, height = image.size
    flat = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
    return flat.view(height, width, 3).permute(2, 0, 1).contiguous()  # (h, w, 3) -> (3, h, w)


def rescale_normalize(
    pixels: torch.Tensor, scale: float, mean: Sequence[float], std: Sequence[float]
) -> torch.Tensor:
    """``(pixels * scale - mean) / std`` with transformers' dtypes: the product in float64, then float32.

    Args:
        pixels: (..., 3, h, w) uint8 (or float) pixel values.
        scale: the rescale factor (1/255 in every shipped config).
        mean: per-channel mean, 3 values.
        std: per-channel standard deviation, 3 values.

    Returns:
        (..., 3, h, w) float32.
    """
    scaled = (pixels.to(torch.float64) * scale).to(torch.float32)
    m = torch.tensor(mean, dtype=torch.float32).view(3, 1, 1)  # (3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(3, 1, 1)
    return (scaled - m) / s


@lru_cache(maxsize=16)
def _lookup(scale: float, mean: tuple[float, ...], std: tuple[float, ...]) -> tuple[list[float], ...]:
    """Each channel's value for each of the 256 uint8 levels, by `rescale_normalize` itself."""
    levels = torch.arange(256, dtype=torch.uint8).expand(3, 1, 256)  # (3, 1, 256)
    return tuple(row.tolist() for row in rescale_normalize(levels, scale, mean, std).view(3, 256))


def pixels(image: Image.Image, scale: float, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """An RGB image rescaled and normalised, as `rescale_normalize(to_uint8(image), ...)` gives it.

    A uint8 channel has 256 levels, so each channel is mapped through a 256-entry table of those values
    (Pillow's `point` into a float32 image): the same float32 numbers, without float64 arithmetic on
    every pixel (several times faster on a busy CPU).

    Returns:
        (3, h, w) float32.
    """
    width, height = image.size
    tables = _lookup(float(scale), tuple(mean), tuple(std))
    # each band a float32 image, row-major; joined in Python (one memcpy, no multi-threaded torch copy)
    data = bytearray(b"".join(band.point(table, "F").tobytes() for band, table in zip(image.split(), tables)))
    return torch.frombuffer(data, dtype=torch.float32).view(3, height, width)
