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

from ftune.config.reward_checks import NO_REWARDS, name_problems, weight_problems
from ftune.config.settings import setting
from ftune.config.time_limit import check_time_limit
from ftune.settings.training import FullSettings

LOSS_TYPES = ("grpo", "dapo", "dr_grpo")
_GRPO_LOSS = ("ftune.training.GRPOLoss", "ftune.training.methods.grpo_loss.GRPOLoss")
_REWARD_SET = ("ftune.rewards.RewardSet", "ftune.rewards.reward_set.RewardSet")
_ABSENT = object()


def loss_problems(args: dict[str, Any]) -> list[tuple[str, str]]:
    """(argument, what is wrong) for each of GRPOLoss's arguments in `args` out of range; an argument
    `args` leaves out is not checked (the signature check names it). `ftune.training.GRPOLoss` raises the
    first; `ftune run` names them all before torch is imported (`GRPOSettings.section_problems`)."""
    out = []
    loss_type, epsilon = args.get("loss_type", _ABSENT), args.get("epsilon", _ABSENT)
    epsilon_high, beta = args.get("epsilon_high", _ABSENT), args.get("beta", _ABSENT)
    length, num_chunks = args.get("max_completion_length", _ABSENT), args.get("num_chunks", _ABSENT)
    if loss_type is not _ABSENT and loss_type not in LOSS_TYPES:
        out.append(("loss_type", f"loss_type must be one of {list(LOSS_TYPES)}, got {loss_type!r}."))
    if epsilon is not _ABSENT and not (isinstance(epsilon, (int, float)) and 0 < epsilon < 1):
        out.append(
            ("epsilon", f"epsilon must be in (0, 1) (the clip 1 - epsilon), got {epsilon!r}; TRL uses 0.2.")
        )
    if epsilon_high not in (_ABSENT, None) and not (
        isinstance(epsilon_high, (int, float)) and 0 < epsilon_high < math.inf
    ):
        out.append(
            (
                "epsilon_high",
                f"epsilon_high must be > 0 or null (same as epsilon), got {epsilon_high!r}; DAPO uses 0.28.",
            )
        )
    if beta is not _ABSENT and not (isinstance(beta, (int, float)) and 0 <= beta < math.inf):
        out.append(("beta", f"beta must be >= 0 (0: no KL term), got {beta!r}; DeepSeek-R1 uses 0.001."))
    length_ok = length is None or (isinstance(length, int) and not isinstance(length, bool) and length > 0)
    if (
        length is not _ABSENT
        and loss_type in LOSS_TYPES
        and ((length is None) == (loss_type == "dr_grpo") or not length_ok)
    ):
        out.append(
            (
                "max_completion_length",
                "max_completion_length is Dr. GRPO's constant normaliser: set it to the rollout's max new tokens "
                f"(a positive int) for loss_type 'dr_grpo' and leave it null otherwise; got loss_type "
                f"{loss_type!r}, max_completion_length {length!r}.",
            )
        )
    if num_chunks is not _ABSENT and (
        isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1
    ):
        out.append(("num_chunks", f"num_chunks must be a positive int, got {num_chunks!r}."))
    return out


def _reward_problems(rewards: dict[str, Any]) -> list[str]:
    """A RewardSet section's names, weights and time limit, as RewardSet checks them when built."""
    named, weights = rewards.get("rewards"), rewards.get("weights")
    out = []
    if isinstance(named, dict):
        out += name_problems(named) if named else [NO_REWARDS]
        if named and isinstance(weights, dict):
            out += weight_problems(named, weights)
    if "time_limit_s" in rewards:
        try:
            check_time_limit(rewards["time_limit_s"], "rewards.time_limit_s")
        except ValueError as e:
            out.append(str(e))
    return out


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
    padding_free: bool = setting(
        False, "the update lays a rollout's rows end to end in one row: no compute on padding (same loss)"
    )

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
        dr_grpo = loss.get("loss_type") == "dr_grpo" and loss.get("max_completion_length") not in (
            None,
            max_new_tokens,
        )
        if loss.get("_component_") in _GRPO_LOSS:  # GRPOLoss's own checks, before torch is imported
            out += [
                f"loss.{arg}: {text}"
                for arg, text in loss_problems(loss)
                if not (dr_grpo and arg == "max_completion_length")
            ]
        rewards = data.get("rewards")
        if isinstance(rewards, dict) and rewards.get("_component_") in _REWARD_SET:
            out += _reward_problems(rewards)
        if dr_grpo:
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
