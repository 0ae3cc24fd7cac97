"""The generate recipe's scalars, declared once: type, default, one line of help."""

from __future__ import annotations

from dataclasses import dataclass

from ftune.checkpointing.settings import InferenceModelSettings
from ftune.config.settings import setting


@dataclass
class GenerateSettings(InferenceModelSettings):
    """The generate recipe: one prompt (or system + prompt) through the chat template, streamed."""

    prompt: str | None = setting(None, "the user message (or the raw text with chat=false); required")
    system: str | None = setting(None, "a system message before the prompt (chat only)")
    chat: bool = setting(True, "wrap the prompt in the model's chat template (false: raw text completion)")
    max_new_tokens: int = setting(256, "tokens to generate at most")
    temperature: float = setting(0.0, "sampling temperature; 0 is greedy")
    top_k: int | None = setting(None, "sample among the k most likely tokens (null: all)")
    top_p: float | None = setting(None, "sample within this nucleus probability (null: off)")
    seed: int = setting(0, "sampling seed")
