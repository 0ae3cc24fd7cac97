"""Prompts with images laid out for generation: token ids, pixels and the model's further image inputs.

The generate and eval recipes answer prompts with images through `ftune.generation.generate_batch`.
A prompt is laid out as an image prompt dataset lays it out (`ftune.datasets.image_prompt_dataset`:
the chat template with each image's tokens where its image part is, ending where the reply begins),
and a batch of them is stacked as `ftune.data.padded_collate_vision` stacks training batches, so the
model sees at generation exactly the pixels and tokens it trained on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image

from ftune.data.collate import padded_collate_vision
from ftune.datasets.image_prompts import ImagePromptDataset, image_prompt_dataset

if TYPE_CHECKING:
    from ftune.tokenizers.base import Tokenizer

# A cross-attention model's (Llama 3.2 Vision's) inputs beyond the pixels, as the collate names them.
CROSS_ATTENTION_INPUTS = ("aspect_ratio_ids", "aspect_ratio_mask", "cross_attention_mask", "image_sample")


@dataclass(frozen=True)
class ImagePrompts:
    """Prompts for `generate_batch(model, p.tokens, pixel_values=p.pixel_values, image_inputs=p.image_inputs)`.

    Attributes:
        tokens: each prompt's token ids, its images' tokens laid out.
        pixel_values: every prompt's images in order (the collate's ``pixel_values``), or None.
        image_inputs: Llama 3.2 Vision's aspect ratios, cross-attention mask (b, s, images, tiles)
            and ``image_sample``; empty for the families whose images replace placeholder tokens.
    """

    tokens: list[list[int]]
    pixel_values: torch.Tensor | None = None
    image_inputs: dict[str, torch.Tensor] = field(default_factory=dict)


def image_prompts_batch(items: Sequence[Mapping[str, Any]], dataset: ImagePromptDataset) -> ImagePrompts:
    """Stack `dataset`'s items ({"tokens", "images"}) into one batch of prompts for generation.

    A Llama 3.2 Vision prompt also gets its cross-attention mask (which tiles each token reads), as
    its training samples do (`MllamaImageTransform.sample_inputs`).
    """
    layout = dataset.layout
    transform = layout.image_transform
    rows = []
    for item in items:
        row = {"tokens": item["tokens"], "labels": item["tokens"], "images": item["images"]}
        if hasattr(transform, "sample_inputs"):  # a prompt without images reads no tile
            row["cross_attention_mask"] = (
                transform.sample_inputs(item["tokens"], item["images"], layout.image_id)[
                    "cross_attention_mask"
                ]
                if item["images"]
                else torch.zeros(len(item["tokens"]), 0, transform.max_tiles, dtype=torch.long)
            )
        rows.append(row)
    collated = padded_collate_vision(rows, pad_id=0)
    pixel_values = collated.get("pixel_values")
    extra = {}
    if pixel_values is not None and "cross_attention_mask" in collated:
        extra = {k: collated[k] for k in CROSS_ATTENTION_INPUTS}
    return ImagePrompts([list(item["tokens"]) for item in items], pixel_values, extra)


def image_chat_prompt(
    tokenizer: Tokenizer,
    image_transform: Any,
    *,
    text: str,
    images: Sequence[Image.Image],
    system: str | None = None,
) -> ImagePrompts:
    """One user turn of `images` then `text` (after an optional system turn), laid out for generation.

    The images come before the text in the user's turn, as torchtune's generate_v2 prompt and the
    families' chat-template examples put them.

    Args:
        tokenizer: the image-text model's tokenizer (with its chat template and image tokens).
        image_transform: the family's transform, or its name (``gemma3``, ``idefics3``, ``mllama``, ``llava``).
        text: the user's message.
        images: the images, read (`ftune.config.image_checks.read_image`).
        system: a system message, or None.

    Raises:
        ValueError: the tokenizer lacks the family's image token (see `placeholder_id`).
    """
    content: list[dict[str, Any]] = [{"type": "image", "image": image} for image in images]
    messages = [{"role": "system", "content": system}] if system is not None else []
    messages.append({"role": "user", "content": [*content, {"type": "text", "text": text}]})
    dataset = image_prompt_dataset(
        tokenizer, source="prompt", image_transform=image_transform, records=[{"messages": messages}]
    )
    return image_prompts_batch([dataset[0]], dataset)
