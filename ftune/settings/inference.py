"""Where generate and eval take their model from, declared once for both (see `load_inference_model`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ftune.config.settings import Settings, setting


@dataclass
class InferenceModelSettings(Settings):
    """The model of an inference recipe: the checkpointer's folder, plus an adapter folder merged in,
    or the quantize recipe's output instead."""

    # `model` is optional: without it the architecture is read from the checkpoint's config.json.
    COMPONENTS: ClassVar[dict[str, bool]] = {"checkpointer": True, "tokenizer": True, "model": False}

    adapter_dir: str | None = setting(None, "a LoRA/DoRA step folder (PEFT format) merged into the model")
    quantized_checkpoint: str | None = setting(
        None, "the quantize recipe's output folder (used instead of the checkpointer)"
    )
    device: str = setting("cpu", "cpu, cuda, mps or auto")
    dtype: Literal["fp32", "bf16", "fp16"] = setting(
        "fp32", "compute dtype (a quantized checkpoint keeps its own)"
    )
