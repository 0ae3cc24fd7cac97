"""The quantize recipe's scalars, declared once: type, default, one line of help."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from ftune import registry
from ftune.config.recipe_kind import recorded_kind
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

    @classmethod
    def section_problems(cls, data: dict[str, Any]) -> list[str]:
        """``qat: true`` on weights whose run recorded a recipe without QAT (its step folder's
        recipe_state.pt): converting would quantize with fake-quantization scales the weights never
        trained under, silently; refused, with the two fixes. A folder with no record (a Hugging Face
        folder, an export) is taken at its word."""
        if data.get("qat") is not True:
            return []
        checkpointer = data.get("checkpointer")
        folder = data.get("adapter_dir") or (checkpointer or {}).get("checkpoint_dir")
        if not isinstance(folder, str):
            return []
        key = "adapter_dir" if data.get("adapter_dir") else "checkpointer.checkpoint_dir"
        recipe, _ = recorded_kind(Path(folder).expanduser() / "recipe_state.pt")
        shipped = registry.RECIPES.get(recipe) if recipe else None
        if shipped is None or "qat" in shipped.tags:
            return []
        qat = sorted(name for name, r in registry.RECIPES.items() if "qat" in r.tags)
        return [
            f"qat: true, but {key} {folder!r} was written by {recipe}, which trains without QAT (its "
            "recipe_state.pt says so): there is no fake quantization to convert, and qat=true would quantize "
            "with scales the weights never trained under. Set qat=false (post-training quantization of these "
            f"weights), or point {key} at a step folder of a QAT run ({', '.join(qat)})."
        ]
