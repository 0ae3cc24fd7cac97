"""Settings of the GRPO recipes (online RL): how completions are sampled and how often a rollout is reused.

A GRPO step samples ``group_size`` completions of each of its prompts (``batch_size`` prompts a
micro-batch, ``grad_accum_steps`` micro-batches a step), scores them with the ``rewards`` section
and trains on them with the ``loss`` section (``ftune.training.GRPOLoss``); ``num_iterations``
optimizer steps reuse one rollout (PPO-style, the policy ratio clipped by the loss's epsilon).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ftune.config.settings import setting
from ftune.settings.training import FullSettings


@dataclass
class GRPOSettings(FullSettings):
    """Full-policy GRPO (full_grpo_single_device, full_grpo_distributed): adds the `rewards` section."""

    COMPONENTS: ClassVar[dict[str, bool]] = {**FullSettings.COMPONENTS, "rewards": True}

    group_size: int = setting(8, "completions sampled per prompt (G); advantages compare them (>= 2)")
    max_new_tokens: int = setting(64, "the most tokens of a completion")
    temperature: float = setting(1.0, "sampling temperature (> 0); the loss reads log-probabilities at it")
    top_k: int | None = setting(None, "sample among the k most likely tokens (null: no filter)")
    top_p: float | None = setting(None, "sample within the nucleus of this probability (null: no filter)")
    stop_strings: list[str] = setting(
        [], "strings that end a completion (kept in it), besides the stop tokens"
    )
    num_iterations: int = setting(1, "optimizer steps per rollout (PPO-style; > 1 clips the policy ratio)")
    scale_rewards: bool = setting(True, "divide advantages by the group's reward std (false: Dr. GRPO)")

    def problems(self) -> list[str]:
        out = super().problems()
        if self.group_size < 2:
            out.append(
                f"group_size: must be >= 2, got {self.group_size!r}: advantages compare a prompt's completions "
                "with one another (one completion has nothing to compare with). Typical: 4 to 16."
            )
        if self.max_new_tokens < 1:
            out.append(f"max_new_tokens: must be >= 1, got {self.max_new_tokens!r}.")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            out.append(
                f"temperature: must be a finite number > 0, got {self.temperature!r}: GRPO learns from the "
                "differences between sampled completions, and greedy decoding (0) makes them all the same. "
                "Typical: 0.7 to 1.0."
            )
        if self.top_k is not None and self.top_k < 1:
            out.append(f"top_k: must be >= 1 or null (no filter), got {self.top_k!r}.")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            out.append(f"top_p: must be in (0, 1] or null (no filter), got {self.top_p!r}.")
        if any(not isinstance(t, str) or not t for t in self.stop_strings):
            out.append(
                f"stop_strings: must be non-empty strings, got {self.stop_strings!r}, e.g. stop_strings=['</answer>']."
            )
        if self.num_iterations < 1:
            out.append(
                f"num_iterations: must be >= 1 (1: each rollout serves one step), got {self.num_iterations!r}."
            )
        if self.optimizer_in_backward:
            out.append(
                "optimizer_in_backward: not supported by the GRPO recipes (the old log-probabilities of a "
                "reused rollout and the clipped ratio need the step to end before the weights change); "
                "set optimizer_in_backward=false."
            )
        return out

    @classmethod
    def section_problems(cls, data: dict[str, Any]) -> list[str]:
        out = super().section_problems(data)
        loss = data.get("loss") if isinstance(data.get("loss"), dict) else {}
        max_new_tokens = data.get("max_new_tokens", cls.__dataclass_fields__["max_new_tokens"].default)
        if loss.get("loss_type") == "dr_grpo" and loss.get("max_completion_length") not in (
            None,
            max_new_tokens,
        ):
            out.append(
                f"loss.max_completion_length: Dr. GRPO's constant must be the rollout's max_new_tokens "
                f"({max_new_tokens}), got {loss.get('max_completion_length')!r}; set "
                "loss.max_completion_length: ${max_new_tokens}."
            )
        return out


@dataclass
class LoRAGRPOSettings(GRPOSettings):
    """LoRA-policy GRPO (lora_grpo_single_device, lora_grpo_distributed): adds the `peft` section; the
    reference is the policy with its adapters off."""

    COMPONENTS: ClassVar[dict[str, bool]] = {**GRPOSettings.COMPONENTS, "peft": True}
