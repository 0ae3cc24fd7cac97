"""What a checkpointer's `load()` returns: the weights of a folder, in ftune names, and what came with them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

StateDict = dict[str, torch.Tensor]


@dataclass
class Loaded:
    """What `Checkpointer.load()` returns.

    Attributes:
        model: model weights in ftune names (base model on a LoRA run).
        adapter: adapter weights in ftune names when resuming a LoRA run, else None.
        recipe_state: contents of `recipe_state.pt` when resuming, else None.
        family: the model family (a key of `ftune.models.CONVERTERS`).
        step_dir: the step folder resumed from, or None on a fresh run.
        qat_ranges: the learned quantization ranges (`qat_ranges.safetensors`, ftune names) of the
            folder the weights come from, when a QAT run with `quantizer.learn_ranges=true` wrote it;
            else None.
    """

    model: StateDict
    adapter: StateDict | None
    recipe_state: dict[str, Any] | None
    family: str
    step_dir: Path | None
    qat_ranges: StateDict | None = None
