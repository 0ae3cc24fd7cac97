"""A batch of prompts for online RL: their tokens, their text and the records the rewards read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ftune.config import instantiate
from ftune.data.collate import padded_collate_vision


@dataclass(frozen=True)
class PromptBatch:
    """Prompts a GRPO rollout completes (``ftune.datasets.PromptDataset`` items, collated).

    Attributes:
        tokens: each prompt's token ids, in the model's chat format, ending where the reply begins.
        prompts: each prompt's text, as the rewards receive it.
        samples: each record's other fields (a reference answer, ...), as the rewards receive them.
        indices: each prompt's index in its dataset: with the run's seed and the rollout's number it
            seeds the prompt's sampling, so a prompt's completions do not depend on the batch it is in.
        pixel_values: the prompts' images in prompt order, each prompt's once
            (``ftune.datasets.image_prompt_dataset``), or None: text prompts.
        image_sample: ``[n]`` long, the prompt each image belongs to, or None.
    """

    tokens: list[list[int]]
    prompts: list[str]
    samples: list[dict[str, Any]]
    indices: list[int]
    pixel_values: torch.Tensor | None = None
    image_sample: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.tokens)


def collate_prompts(batch: Sequence[dict[str, Any]]) -> PromptBatch:
    """Collate prompt items ({"tokens", "prompt", "sample", "index"}) into a :class:`PromptBatch`.

    Raises:
        ValueError: the batch is empty or an item lacks one of the keys.
    """
    if not batch:
        raise ValueError("collate_prompts: got an empty batch; a batch needs at least one prompt.")
    keys = ("tokens", "prompt", "sample", "index")
    missing = sorted({k for item in batch for k in keys if k not in item})
    if missing:
        raise ValueError(
            f"collate_prompts: items lack {missing}; a GRPO dataset gives {list(keys)} per prompt "
            "(ftune.datasets.prompt_dataset)."
        )
    images = {}
    if "images" in batch[0]:  # stacked as an image batch's are (the tokens are not needed here)
        rows = [
            {"tokens": item["tokens"], "labels": item["tokens"], "images": item["images"]} for item in batch
        ]
        images = {
            k: v for k, v in padded_collate_vision(rows, 0).items() if k in ("pixel_values", "image_sample")
        }
    return PromptBatch(
        tokens=[list(item["tokens"]) for item in batch],
        prompts=[item["prompt"] for item in batch],
        samples=[item["sample"] for item in batch],
        indices=[int(item["index"]) for item in batch],
        **images,
    )


def build_prompt_collate(node: Any) -> Any:
    """The collate function of a GRPO recipe: the config's ``collate_fn``, or :func:`collate_prompts`."""
    if node is None:
        return collate_prompts
    return instantiate(node, _path="collate_fn")
