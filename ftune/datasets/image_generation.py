"""Prompts with images laid out for generation: token ids, pixels and the model's further image inputs.

The generate and eval recipes answer prompts with images through `ftune.generation.generate_batch`.
A prompt is laid out as an image prompt dataset lays it out (`ftune.datasets.image_prompt_dataset`:
the chat template with each image's tokens where its image part is, ending where the reply begins),
and a batch of them is stacked as `ftune.data.padded_collate_vision` stacks training batches, so the
model sees at generation exactly the pixels and tokens it trained on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image

from ftune.data.collate import padded_collate_vision
from ftune.data.image_transforms import LlavaImageTransform
from ftune.datasets.image_prompts import ImagePromptDataset, image_prompt_dataset
from ftune.datasets.multimodal import image_transform_of
from ftune.models import is_image_text_model_config
from ftune.models._image_text_config import IMAGE_TEXT_MODEL_TYPES

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


# config.json's image-text family -> the name of its image transform (`ftune.datasets.multimodal.IMAGE_TRANSFORMS`)
TRANSFORM_OF_FAMILY = {"gemma3_vision": "gemma3", "smolvlm": "idefics3", "llama3_2_vision": "mllama"}


def check_image_model_folder(checkpoint_dir: str | Path, *, image_text: bool, key: str) -> dict[str, Any]:
    """Refuse, before any model loads, images for a folder whose model takes none.

    Args:
        checkpoint_dir: the checkpointer's folder (or the quantize recipe's folder or its model.pt).
        image_text: the checkpointer reads the folder whole (``checkpointer.image_text``).
        key: the setting that holds the images, for the message.

    Returns:
        The folder's config.json.

    Raises:
        ValueError: no config.json, a text model's config.json, or an image-text folder read as text only.
    """
    folder = Path(checkpoint_dir).expanduser()
    path = (folder.parent if folder.is_file() else folder) / "config.json"
    accepted = ", ".join(sorted(IMAGE_TEXT_MODEL_TYPES))
    if not path.is_file():
        raise ValueError(
            f"{key}: images were given, but {str(path)!r} does not exist, so whether the model takes images is "
            f"unknown; point checkpointer.checkpoint_dir at an image-text model's folder (config.json model_type "
            f"{accepted}), or leave {key} empty."
        )
    config = json.loads(path.read_text(encoding="utf-8"))
    if not is_image_text_model_config(config):
        raise ValueError(
            f"{key}: images were given, but {str(path)!r} describes a text-only model (model_type "
            f"{config.get('model_type')!r}); images need an image-text model (model_type {accepted}): point "
            f"checkpointer.checkpoint_dir at one, or leave {key} empty."
        )
    if not image_text:
        raise ValueError(
            f"{key}: images were given, but checkpointer.image_text is false, so {str(path.parent)!r} is read as "
            "its text decoder only (no vision encoder); set checkpointer.image_text=true, or leave "
            f"{key} empty."
        )
    return config


def family_image_transform(config: Mapping[str, Any]) -> Any:
    """The image transform of an image-text config.json's family, with its processor's published
    defaults (LLaVA: the encoder's image and patch size from vision_config).

    Raises:
        ValueError: a config.json of no image-text family ftune builds.
    """
    family = IMAGE_TEXT_MODEL_TYPES[config["model_type"]][0]
    if family == "llava":
        vision = config.get("vision_config") or {}
        return LlavaImageTransform(
            image_size=vision.get("image_size", 224), patch_size=vision.get("patch_size", 16)
        )
    return image_transform_of(TRANSFORM_OF_FAMILY[family])
