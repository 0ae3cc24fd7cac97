"""Settings of the agent GRPO recipe: multi-turn conversations with an environment, and their budgets.

An agent step starts ``group_size`` episodes of each of its records with the ``environment`` section
(an ``ftune.agents.Environment``), lets the policy take up to ``max_turns`` turns in each (a turn is
read with the ``tool_format`` section's parser), and trains on the model's tokens of every turn with
the ``loss`` section. The three budgets have no default: a config states them (a turn, a trajectory
and the number of turns are what a task needs, and a forgotten budget is a run that never ends or
one that cuts every answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ftune.config.settings import setting
from ftune.settings.grpo import LoRAGRPOSettings

_BUDGETS = {
    "max_turns": "model turns per trajectory, e.g. max_turns: 4",
    "max_turn_tokens": "tokens of one model turn, e.g. max_turn_tokens: 64",
    "max_trajectory_tokens": (
        "tokens after the prompt, the model's and the environment's (TRL's max_completion_length), "
        "e.g. max_trajectory_tokens: 256"
    ),
}


@dataclass
class AgentGRPOSettings(LoRAGRPOSettings):
    """LoRA-policy agent GRPO (lora_grpo_agent_single_device): adds the `environment` and `tool_format`
    sections and the turn budgets; `max_new_tokens` is not read (the budgets bound the turns)."""

    COMPONENTS: ClassVar[dict[str, bool]] = {
        **LoRAGRPOSettings.COMPONENTS,
        "environment": True,
        "tool_format": True,
    }

    max_turns: int | None = setting(None, "model turns per trajectory (>= 1; required)")
    max_turn_tokens: int | None = setting(None, "tokens of one model turn (>= 1; required)")
    max_trajectory_tokens: int | None = setting(
        None, "tokens after the prompt, model and environment alike (>= 1; required; dr_grpo's constant)"
    )

    max_off_policy_steps: int | None = setting(
        None,
        "sample rollouts in a worker process up to this many steps ahead of training (0: beside training "
        "but on-policy; null: in the step, in this process)",
    )
    refresh_every: int = setting(1, "steps between two refreshes of the worker's copy of the policy (>= 1)")
    importance_sampling_cap: float = setting(
        3.0,
        "C of the truncated importance weights min(exp(log pi_old - log pi_sampler), C) of stale rollouts",
    )

    def problems(self) -> list[str]:
        out = super().problems()
        if self.max_off_policy_steps is not None and self.max_off_policy_steps < 0:
            out.append(
                f"max_off_policy_steps: must be >= 0 or null (rollouts in the step), got {self.max_off_policy_steps!r}."
            )
        if self.refresh_every < 1:
            out.append(
                f"refresh_every: must be >= 1 (steps between weight refreshes), got {self.refresh_every!r}."
            )
        if not self.importance_sampling_cap > 0:
            out.append(
                f"importance_sampling_cap: must be > 0 (TRL uses 3.0), got {self.importance_sampling_cap!r}."
            )
        if self.max_off_policy_steps is not None and self.num_iterations != 1:
            out.append(
                f"num_iterations: must be 1 with max_off_policy_steps set (a rollout reused over steps and one "
                f"sampled beside training are two kinds of staleness), got {self.num_iterations}; set "
                "num_iterations=1 or max_off_policy_steps=null."
            )
        for key, what in _BUDGETS.items():
            value = getattr(self, key)
            if value is None or value < 1:
                out.append(f"{key}: must be an int >= 1 ({what}), got {value!r}; set it in the config.")
        return out

    @classmethod
    def section_problems(cls, data: dict[str, Any]) -> list[str]:
        # Dr. GRPO's constant is the trajectory budget here, not max_new_tokens (unused by this recipe).
        budget = data.get("max_trajectory_tokens")
        out = [
            p
            for p in super().section_problems({**data, "max_new_tokens": budget})
            if "must be the rollout's max_new_tokens" not in p
        ]
        loss = data.get("loss") if isinstance(data.get("loss"), dict) else {}
        if loss.get("loss_type") == "dr_grpo" and loss.get("max_completion_length") not in (None, budget):
            out.append(
                f"loss.max_completion_length: Dr. GRPO's constant must be the trajectory budget "
                f"max_trajectory_tokens ({budget}), got {loss.get('max_completion_length')!r}; set "
                "loss.max_completion_length: ${max_trajectory_tokens}."
            )
        return out
