"""The generate recipe's scalars, declared once: type, default, one line of help."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ftune.config.settings import Settings, setting


@dataclass
class GenerateSettings(Settings):
    """The generate recipe: one prompt (or system + prompt) through the chat template, streamed."""

    # `model` is optional: without it the architecture is read from the checkpoint's config.json.
    COMPONENTS: ClassVar[dict[str, bool]] = {"checkpointer": True, "tokenizer": True, "model": False}

    prompt: str | None = setting(None, "the user message (or the raw text with chat=false); required")
    system: str | None = setting(None, "a system message before the prompt (chat only)")
    chat: bool = setting(True, "wrap the prompt in the model's chat template (false: raw text completion)")
    adapter_dir: str | None = setting(None, "a LoRA/DoRA step folder (PEFT format) merged into the model")
    quantized_checkpoint: str | None = setting(
        None, "the quantize recipe's output folder (used instead of the checkpointer)"
    )
    max_new_tokens: int = setting(256, "tokens to generate at most")
    temperature: float = setting(0.0, "sampling temperature; 0 is greedy")
    top_k: int | None = setting(None, "sample among the k most likely tokens (null: all)")
    top_p: float | None = setting(None, "sample within this nucleus probability (null: off)")
    seed: int = setting(0, "sampling seed")
    device: str = setting("cpu", "cpu, cuda, mps or auto")
    dtype: Literal["fp32", "bf16", "fp16"] = setting(
        "fp32", "compute dtype (a quantized checkpoint keeps its own)"
    )
