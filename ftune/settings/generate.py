"""The generate recipe's scalars, declared once: type, default, one line of help."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ftune.config.settings import setting
from ftune.settings.inference import InferenceModelSettings


@dataclass
class GenerateSettings(InferenceModelSettings):
    """The generate recipe: one prompt (or system + prompt) through the chat template, streamed."""

    # image_transform: the family's image transform for `images` (null: config.json's family's defaults)
    COMPONENTS: ClassVar[dict[str, bool]] = {**InferenceModelSettings.COMPONENTS, "image_transform": False}

    prompt: str | None = setting(None, "the user message (or the raw text with chat=false); required")
    system: str | None = setting(None, "a system message before the prompt (chat only)")
    images: list[str] = setting(
        [], "local image files shown before the prompt's text, in order (an image-text model only)"
    )
    chat: bool = setting(True, "wrap the prompt in the model's chat template (false: raw text completion)")
    max_new_tokens: int = setting(256, "tokens to generate at most")
    temperature: float = setting(0.0, "sampling temperature; 0 is greedy")
    top_k: int | None = setting(None, "sample among the k most likely tokens (null: all)")
    top_p: float | None = setting(None, "sample within this nucleus probability (null: off)")
    seed: int = setting(0, "sampling seed")

    def problems(self) -> list[str]:
        """Sampling values that cannot work (the rules of ftune.generation.check_sampling_args), before the model loads."""
        out = super().problems()
        if self.images and not self.chat:
            out.append(
                f"images: {len(self.images)} image(s) given with chat=false; images go into the chat template's "
                "user turn: set chat=true, or images=[]."
            )
        if self.max_new_tokens < 1:
            out.append(f"max_new_tokens: must be >= 1, got {self.max_new_tokens!r}.")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            out.append(
                f"temperature: must be a finite number >= 0, got {self.temperature!r} (0 is greedy decoding; "
                "0.7 is a usual sampling value)."
            )
        if self.top_k is not None and self.top_k < 1:
            out.append(f"top_k: must be >= 1 or null (no top-k filtering), got {self.top_k!r}.")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            out.append(f"top_p: must be in (0, 1] or null (no nucleus filtering), got {self.top_p!r}.")
        return out
