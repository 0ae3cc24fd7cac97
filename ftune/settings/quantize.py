"""The quantize recipe's scalars, declared once: type, default, one line of help."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ftune.config.settings import Settings, setting


@dataclass
class QuantizeSettings(Settings):
    """The quantize recipe (PTQ, or QAT convert)."""

    # `model` is optional: without it the architecture is read from the checkpoint's config.json.
    COMPONENTS: ClassVar[dict[str, bool]] = {"checkpointer": True, "quantizer": True, "model": False}

    output_dir: str = setting("output/quantized", "folder for the native quantized checkpoint")
    qat: bool = setting(False, "the checkpoint was trained with QAT: prepare then convert (else PTQ)")
    adapter_dir: str | None = setting(None, "a LoRA/DoRA step folder merged into the model before quantizing")
    device: str = setting("cpu", "cpu, cuda, mps or auto")
    dtype: Literal["fp32", "bf16", "fp16"] = setting("fp32", "dtype of the float weights before quantizing")
