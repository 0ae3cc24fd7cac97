"""One agent GRPO micro-batch: G multi-turn conversations per record with the config's environment, scored.

An agent recipe's ``rollout_on(prompts, epoch)`` calls :func:`sample_trajectories` (the policy's turns on
the KV cache, ``ftune.generation.multi_turn``, in eval mode, each row seeded by the run's seed, the epoch,
the record's dataset index and its place in the group, as a single-turn rollout is), then
:func:`score_trajectories` and ``training.rollout_batch``: the same :class:`RolloutBatch` and
``training.grpo_loss`` as single-turn GRPO, so the loss, its aggregation (grpo, dapo, dr_grpo), the old
and reference log-probabilities and resume are one code path.

What differs is the row: prompt + every turn, the model's tokens labelled and the environment's -100
(``Trajectories.training_batch``). So ``grpo`` averages a trajectory's MODEL tokens, ``dapo`` divides by
the step's model tokens, and ``dr_grpo`` by rows x ``loss.max_completion_length``, which is the
trajectory budget (``max_trajectory_tokens``: model and environment tokens, as TRL 1.16's
``max_completion_length`` with its ``tool_mask``). A trajectory's reward is the sum of its
environment's step rewards plus the config's rule rewards (``rewards``, a ``RewardSet``) on its final
answer (the last model turn's text); its group-relative advantage applies to all its model tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from torch import nn

from ftune.agents import Environment, Turn
from ftune.data.prompt_batch import PromptBatch
from ftune.generation.chat_tokens import ChatTokens
from ftune.generation.multi_turn import Trajectories, TurnLimits, multi_turn_rollout
from ftune.rewards import RewardSet
from ftune.training.methods.rollout_batch import Sampling, Scores, row_generators, sampling_mode

#: The name the environment's summed reward is logged under (``rewards/environment/mean``).
ENVIRONMENT_REWARD = "environment"


@dataclasses.dataclass(frozen=True)
class Agent:
    """What a multi-turn rollout talks to: the environment, the chat template and the tool-call format.

    Attributes:
        environment: the config's ``environment`` (``ftune.agents.Environment``).
        chat: the tokenizer's chat template with the environment's tools.
        parse: the family's tool-call format, a turn's text to a ``Turn``.
        limits: max turns, tokens a turn and tokens a trajectory (the recipe's settings).
    """

    environment: Environment
    chat: ChatTokens
    parse: Callable[[str], Turn]
    limits: TurnLimits

    @classmethod
    def of(cls, environment: Any, tokenizer: Any, tool_format: Any, settings: Any) -> Agent:
        """From an agent recipe's environment, tokenizer, tool-call format and settings.

        ``tool_format`` is an object with ``parse(text) -> Turn`` (a family's format) or that function.

        Raises:
            ValueError: the environment is not an ``ftune.agents.Environment`` (``tools`` and ``start``).
        """
        if not isinstance(environment, Environment):
            raise ValueError(
                f"environment: got a {type(environment).__module__}.{type(environment).__name__}, which has no "
                "`tools` list and `start(record)` method; set environment._component_ to an "
                "ftune.agents.Environment (e.g. a tool environment over typed functions)."
            )
        parse = getattr(tool_format, "parse", tool_format)
        if not callable(parse):
            raise ValueError(
                f"tool_format: got a {type(tool_format).__name__}, neither a tool-call format with parse(text) "
                "nor a function of the turn's text; set tool_format._component_ to the family's format."
            )
        limits = TurnLimits(
            max_turns=settings.max_turns,
            max_turn_tokens=settings.max_turn_tokens,
            max_trajectory_tokens=settings.max_trajectory_tokens,
        )
        return cls(environment, ChatTokens(tokenizer, environment.tools), parse, limits)


def sample_trajectories(
    model: nn.Module, prompts: PromptBatch, sampling: Sampling, agent: Agent, *, epoch: int
) -> Trajectories:
    """``sampling.group_size`` conversations of each record, in eval mode (no dropout), batched on the KV cache.

    Each record the environment starts from is the prompt dataset's sample with its prompt text under
    ``"prompt"``. ``sampling.max_new_tokens`` is not read: ``agent.limits`` bounds the turns.
    """
    device = next(model.parameters()).device
    gens = row_generators(sampling.seed, epoch, prompts.indices, sampling.group_size, device)
    records = [{**sample, "prompt": text} for sample, text in zip(prompts.samples, prompts.prompts)]
    with sampling_mode(model):
        return multi_turn_rollout(
            model,
            records,
            environment=agent.environment,
            chat=agent.chat,
            parse=agent.parse,
            group_size=sampling.group_size,
            limits=agent.limits,
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            stop_ids=list(sampling.stop_ids),
            pad_id=sampling.pad_id,
            generator=gens,
        )


@dataclasses.dataclass(frozen=True)
class TrajectorySampler:
    """:func:`sample_trajectories` with its sampling and agent bound: ``sampler(model, prompts, epoch=...)``.

    Picklable (when the environment and the tool-call format are), so the worker process of rollouts
    beside training (``training.ProcessSampler``) runs the same function as the step does.
    """

    sampling: Sampling
    agent: Agent

    def __call__(self, model: nn.Module, prompts: PromptBatch, *, epoch: int) -> Trajectories:
        return sample_trajectories(model, prompts, self.sampling, self.agent, epoch=epoch)


def score_trajectories(rewards: RewardSet, prompts: PromptBatch, trajectories: Trajectories) -> Scores:
    """Each trajectory's total reward: its environment rewards summed plus the rule rewards on its final answer.

    Raises:
        ftune.rewards.RewardError: a rule reward raised or returned a non-number.
    """
    g, rows = trajectories.group_size, trajectories.rows
    answers = [r.answer for r in rows]
    total, per = rewards(
        [prompts.prompts[i // g] for i in range(len(rows))],
        answers,
        [prompts.samples[i // g] for i in range(len(rows))],
    )
    env = [r.env_reward for r in rows]
    return Scores([t + e for t, e in zip(total, env)], {**per, ENVIRONMENT_REWARD: env}, answers)
