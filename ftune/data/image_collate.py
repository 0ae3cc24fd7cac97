"""Collate samples that carry images: the text right-padded as `padded_collate_sft` does, the images stacked.

A sample may hold any number of images (0, 1, 2, ...). The batch's images are concatenated along
their first dimension in sample order, then prompt order, which is the order of their image tokens
in the batch's rows: ``pixel_values`` is (n, 3, h, w) with one row a crop or tile the vision tower
encodes (Llama 3.2 Vision: one row an image, (n, max_tiles, 3, h, w)), and ``image_sample`` (n,) says
which sample (row of ``tokens``) each belongs to. The family's further inputs (Idefics3's
``pixel_attention_mask``, Llama 3.2 Vision's ``aspect_ratio_ids`` and ``aspect_ratio_mask``) are
concatenated the same way. A batch without any image has none of these keys.

Packing is refused for samples with images (`ftune.datasets.multimodal_chat_dataset`), and so is
`padding_free_collate`'s one-row layout, which this collate does not make.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ftune.data.collate import CROSS_ENTROPY_IGNORE_IDX, padded_collate_sft


def padded_collate_vision(
    batch: Sequence[dict[str, Any]],
    pad_id: int,
    ignore_idx: int = CROSS_ENTROPY_IGNORE_IDX,
    pad_to_multiple_of: int | None = None,
) -> dict[str, torch.Tensor]:
    """Right-pad the text of {"tokens", "labels", "images"} items and stack their images.

    Args:
        batch: items of `ftune.datasets.MultimodalSFTDataset` ("images": a list of `ImageInputs`).
        pad_id: token id written into padded token positions.
        ignore_idx: label written into padded label positions.
        pad_to_multiple_of: round the padded length up to a multiple of this.

    Returns:
        {"tokens": (b, s), "labels": (b, s)} and, when the batch has images, "pixel_values" (n, ...),
        "image_sample" (n,) long and the family's further per-image inputs.

    Raises:
        ValueError: items whose images differ in their keys or in the shape of a tile.
    """
    out = padded_collate_sft(
        [{"tokens": item["tokens"], "labels": item["labels"]} for item in batch],
        pad_id,
        ignore_idx,
        pad_to_multiple_of,
    )
    images = [(i, image) for i, item in enumerate(batch) for image in item.get("images", ())]
    if not images:
        return out
    keys = {frozenset(image.extra) for _, image in images}
    shapes = {tuple(image.pixel_values.shape[1:]) for _, image in images}
    if len(keys) > 1 or len(shapes) > 1:
        raise ValueError(
            f"padded_collate_vision: the batch's images differ (extra inputs {sorted(map(sorted, keys))}, tile shapes "
            f"{sorted(shapes)}); every image of a batch must come from one image transform with one size."
        )
    out["pixel_values"] = torch.cat([image.pixel_values for _, image in images])
    out["image_sample"] = torch.cat(
        [torch.full((image.pixel_values.shape[0],), i, dtype=torch.long) for i, image in images]
    )
    for key in sorted(next(iter(keys))):
        out[key] = torch.cat([image.extra[key] for _, image in images])
    return out
