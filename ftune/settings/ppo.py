"""Settings of the PPO recipe (ppo_full_finetune_single_device): torchtune 0.6.1's keys where they mean
the same thing.

A step of PPO is one optimizer step on a mini-batch of ``ppo_batch_size`` rows of a trajectory: each
batch of ``batch_size`` prompts is sampled once (one response a prompt, ``max_generated_tokens`` long),
scored by the frozen reward model (the `reward_checkpointer` section) and valued by the value model
(the `value_checkpointer` section: a reward model's checkpoint, trained with the policy), then trained
on for ``ppo_epochs`` passes. torchtune's keys that ftune names otherwise: ``gradient_accumulation_steps``
is ``grad_accum_steps``, ``num_steps`` (prompts) becomes ``max_steps`` (optimizer steps), and the
reference is the policy's base checkpoint (torchtune's ``ref_policy_checkpointer`` must equal it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ftune.config.settings import setting
from ftune.settings.training import FullSettings

_PPO_LOSS = ("ftune.training.PPOLoss", "ftune.training.methods.ppo_loss.PPOLoss")


def loss_problems(args: dict[str, Any]) -> list[str]:
    """What is wrong with each of PPOLoss's arguments in `args` (one left out is not checked): the
    messages `ftune.training.PPOLoss` raises, which `ftune run` gives before torch is imported."""
    out = []
    for name in ("epsilon", "value_clip_range", "value_coeff"):
        if name not in args:
            continue
        value = args[name]
        number = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        if not number or value < 0 or (name == "epsilon" and value == 0):
            accepted = "> 0" if name == "epsilon" else ">= 0"
            out.append(
                f"loss.{name}: PPOLoss needs a number {accepted}, got {value!r}; torchtune's PPO configs use "
                "epsilon 0.2, value_clip_range 0.2, value_coeff 0.1."
            )
    return out


@dataclass
class PPOSettings(FullSettings):
    """Full-policy PPO with a value model, a frozen reward model and a frozen reference."""

    COMPONENTS: ClassVar[dict[str, bool]] = {
        **FullSettings.COMPONENTS,
        "reward_checkpointer": True,
        "value_checkpointer": True,
    }

    ppo_epochs: int = setting(1, "passes over each trajectory (each pass shuffles it into mini-batches)")
    ppo_batch_size: int = setting(4, "rows an optimizer step trains on; divides batch_size")
    max_generated_tokens: int = setting(
        64, "response length sampled per prompt (cut at the first stop token)"
    )
    temperature: float = setting(1.0, "sampling temperature (> 0); log-probabilities are taken at it")
    top_k: int | None = setting(None, "sample among the k most likely tokens (null: no filter)")
    stop_token_ids: list[int] | None = setting(
        None, "token ids that end a response (null: the tokenizer's stop tokens)"
    )
    min_response_length: int | None = setting(
        None, "penalise responses whose last token index is below this (null: no length penalty)"
    )
    penalise_no_eos: bool = setting(True, "penalise responses that never sample a stop token")
    reward_penalty: float = setting(-3.0, "the score a penalised response gets instead of the reward model's")
    kl_coeff: float = setting(0.01, "KL penalty coefficient beta (the starting value when kl_target is set)")
    kl_target: float | None = setting(
        None, "adaptive KL (Ziegler et al.): move beta towards this summed KL per response (null: fixed beta)"
    )
    kl_horizon: int = setting(10000, "adaptive KL: responses over which beta corrects a KL gap")
    gamma: float = setting(1.0, "GAE discount")
    lmbda: float = setting(0.95, "GAE lambda")

    def problems(self) -> list[str]:
        out = super().problems()
        for key in ("ppo_epochs", "ppo_batch_size", "max_generated_tokens", "kl_horizon"):
            if getattr(self, key) < 1:
                out.append(f"{key}: must be >= 1, got {getattr(self, key)!r}.")
        if self.ppo_batch_size >= 1 and (
            self.batch_size % self.ppo_batch_size or self.ppo_batch_size % self.grad_accum_steps
        ):
            out.append(
                f"ppo_batch_size: batch_size ({self.batch_size}) must be a multiple of ppo_batch_size "
                f"({self.ppo_batch_size}), and ppo_batch_size of grad_accum_steps ({self.grad_accum_steps}): a "
                "trajectory splits into whole optimizer steps and a step into equal micro-batches. E.g. "
                f"ppo_batch_size={self.batch_size}."
            )
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            out.append(
                f"temperature: must be a finite number > 0, got {self.temperature!r}. Typical: 0.7 to 1.0."
            )
        if self.top_k is not None and self.top_k < 1:
            out.append(f"top_k: must be >= 1 or null (no filter), got {self.top_k!r}.")
        if self.stop_token_ids is not None and not self.stop_token_ids:
            out.append("stop_token_ids: must list at least one id, or be null (the tokenizer's stop tokens).")
        if self.min_response_length is not None and self.min_response_length < 0:
            out.append(f"min_response_length: must be >= 0 or null, got {self.min_response_length!r}.")
        if not (math.isfinite(self.kl_coeff) and self.kl_coeff >= 0):
            out.append(
                f"kl_coeff: must be a finite number >= 0, got {self.kl_coeff!r}; torchtune's configs use 0.01."
            )
        if self.kl_target is not None and not (math.isfinite(self.kl_target) and self.kl_target > 0):
            out.append(f"kl_target: must be a number > 0 or null (a fixed kl_coeff), got {self.kl_target!r}.")
        if self.kl_target is not None and not self.kl_coeff > 0:
            out.append(
                f"kl_coeff: the adaptive KL controller (kl_target set) needs kl_coeff > 0, got {self.kl_coeff!r}."
            )
        for key in ("gamma", "lmbda"):
            if not 0 <= getattr(self, key) <= 1:
                out.append(
                    f"{key}: must be in [0, 1], got {getattr(self, key)!r}; torchtune's configs use gamma 1, lmbda 0.95."
                )
        return out

    @classmethod
    def section_problems(cls, data: dict[str, Any]) -> list[str]:
        out = super().section_problems(data)
        loss = data.get("loss") if isinstance(data.get("loss"), dict) else {}
        if loss.get("_component_") in _PPO_LOSS:  # PPOLoss's own checks, before torch is imported
            out += loss_problems(loss)
        return out
