"""Rollouts beside training: prompt batches sampled ahead by a worker, finished into micro-batches by the trainer.

With ``max_off_policy_steps = s`` and ``refresh_every = k``, the loader keeps the sampler (a
``RolloutSampler``: ftune's worker process) up to s steps ahead of training: when the trainer starts
step t it has already submitted the prompt batches of steps t .. t + s, and after each optimizer step it
sends the new weights when the step count is a multiple of k, then submits the next step's batches.
So step t trains on tokens sampled by the policy after step ``k * floor((t - 1 - s) / k)`` (0 at the
start of an epoch, where nothing was submitted earlier): at most ``s + k - 1`` steps older than the
policy it updates. Which weights sample which batch depends on the order of the calls, never on timing.

The trainer finishes each sampled rollout with the recipe's ``finish_on(prompts, epoch, sampled)``
(rewards, advantages, the reference's log-probabilities, and for a stale rollout the current policy's
log-probabilities and the truncated importance weights: ``ftune.training.methods.off_policy``). With s = 0
and k = 1 every rollout is sampled by the current policy (the worker only moves the sampling to another
process): the run is exactly the synchronous one.

Resume is exact: the state holds the prompt loader's position after the last submitted batch and every
batch submitted but not yet trained on, sampled (the state waits for the worker), with the weights
version that sampled it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ftune.data.prompt_batch import PromptBatch
from ftune.generation.multi_turn import Trajectories, Trajectory
from ftune.training.methods.rollout_batch import RolloutBatch
from ftune.training.methods.rollout_loader import RolloutLoader
from ftune.training.methods.rollout_worker import ProcessSampler, RolloutSampler, trainable_weights


@dataclass(frozen=True)
class Sampled:
    """A rollout the sampler made: the rollout, and whether an older policy than the current one sampled it."""

    rollout: Any
    stale: bool


def _trajectories_state(rollout: Trajectories) -> dict[str, Any]:
    rows = [vars(r) for r in rollout.rows]
    return {
        "rows": rows,
        "group_size": rollout.group_size,
        "pad_id": rollout.pad_id,
        "t": rollout.logp_temperature,
    }


def _trajectories(state: dict[str, Any]) -> Trajectories:
    return Trajectories(
        [Trajectory(**r) for r in state["rows"]], state["group_size"], state["pad_id"], state["t"]
    )


class OffPolicyLoader:
    """Prompt batches in, :class:`RolloutBatch` micro-batches out, sampled up to `max_off_policy_steps` ahead.

    Args:
        prompts: the prompt loader (``ftune.data.build_dataloader``: stateful, one epoch an iteration).
        sampler: samples submitted prompt batches (``ProcessSampler``); closed by :meth:`close`.
        finish: the recipe's ``finish_on(prompts, epoch, sampled)``.
        model: the policy (its trainable weights are sent at each refresh).
        grad_accum_steps: micro-batches per optimizer step.
        max_off_policy_steps: s >= 0, the steps the sampler runs ahead.
        refresh_every: k >= 1, the steps between two refreshes of the sampler's weights.
    """

    def __init__(
        self,
        prompts: Iterable[PromptBatch],
        sampler: RolloutSampler,
        finish: Callable[[PromptBatch, int, Sampled], RolloutBatch],
        *,
        model: Any,
        grad_accum_steps: int,
        max_off_policy_steps: int,
        refresh_every: int,
    ) -> None:
        self.prompts, self.sampler, self.finish, self.model = prompts, sampler, finish, model
        self.accum, self.ahead, self.every = grad_accum_steps, max_off_policy_steps, refresh_every
        self.step = 0  # optimizer steps done: the version of the trainer's weights
        self.stepped = (
            False  # a step's last micro-batch was served: the trainer steps before the next request
        )
        # The weights the sampler holds: its copy of the policy as it is now, version 0 (kept for a resume).
        self.sent, self.sent_weights = 0, trainable_weights(model)
        self.inflight: deque[tuple[PromptBatch, int]] = deque()  # submitted, not sampled yet (in order)
        self.ready: deque[tuple[PromptBatch, int, int, Any]] = deque()  # sampled, not trained on yet
        self.served = 0  # micro-batches served in the current step
        self.seconds = 0.0

    def __len__(self) -> int:
        return len(self.prompts)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[RolloutBatch]:
        epoch = self.prompts.state_dict()["epoch"]  # type: ignore[attr-defined]
        # Resumed right after an epoch's last batch was submitted: finish that epoch first, alone.
        old = [r for r in self.ready if r[1] != epoch]
        batches = iter(self.prompts) if not old else iter(())
        while True:
            if self.stepped:
                self.step, self.stepped = self.step + 1, False
                self._refresh()
            if self.served == 0:
                self._submit(batches, epoch)
            if not self.ready and not self.inflight:
                return
            yield self._next()
            self.served += 1
            if self.served == self.accum:
                self.served, self.stepped = 0, True

    def _refresh(self) -> None:
        if self.step % self.every == 0 and self.sent != self.step:
            self.sent, self.sent_weights = self.step, trainable_weights(self.model)
            self.sampler.refresh(self.sent_weights, self.step)

    def _submit(self, batches: Iterator[PromptBatch], epoch: int) -> None:
        """At a step's start: submit until this step's batches and the next `max_off_policy_steps` steps' are."""
        while len(self.ready) + len(self.inflight) < (self.ahead + 1) * self.accum:
            prompts = next(batches, None)
            if prompts is None:
                return
            self.sampler.submit(prompts, epoch)
            self.inflight.append((prompts, epoch))

    def _collect(self) -> None:
        prompts, epoch = self.inflight.popleft()
        version, rollout = self.sampler.result()
        self.ready.append((prompts, epoch, version, rollout))

    def _next(self) -> RolloutBatch:
        start = time.perf_counter()
        if not self.ready:
            self._collect()
        prompts, epoch, version, rollout = self.ready.popleft()
        batch = self.finish(prompts, epoch, Sampled(rollout, stale=version != self.step))
        self.seconds += time.perf_counter() - start
        return batch

    def take_seconds(self) -> dict[str, float]:
        """``{"time/rollout_s": ...}``: seconds this step waited for and finished rollouts (see RolloutLoader)."""
        seconds, self.seconds = self.seconds, 0.0
        return {"time/rollout_s": seconds}

    def state_dict(self) -> dict[str, Any]:
        """{"prompts", "step", "sent", "sent_weights", "served", "ready"}; waits for every submitted batch to
        be sampled. Saved between steps (the recipe saves after a step), so "step" counts the step just made."""
        while self.inflight:
            self._collect()
        ready = [
            {"prompts": vars(p), "epoch": e, "version": v, "rollout": _trajectories_state(r)}
            for p, e, v, r in self.ready
        ]
        state = self.prompts.state_dict()  # type: ignore[attr-defined]
        return {
            "epoch": state["epoch"],
            "prompts": state,
            "step": self.step + self.stepped,
            "sent": self.sent,
            "sent_weights": self.sent_weights,
            "served": self.served,
            "ready": ready,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = [
            k for k in ("prompts", "step", "sent", "sent_weights", "served", "ready") if k not in state
        ]
        if missing:
            raise KeyError(
                f"OffPolicyLoader.load_state_dict: the saved state lacks {missing} (keys: {sorted(state)}): it was "
                "not written by a run with max_off_policy_steps set. Resume with the settings the run was saved with."
            )
        self.prompts.load_state_dict(state["prompts"])  # type: ignore[attr-defined]
        self.step, self.stepped, self.served = int(state["step"]), False, int(state["served"])
        self.sent, self.sent_weights = int(state["sent"]), state["sent_weights"]
        self._refresh()  # the refresh the step just made would have sent, else the weights the sampler held
        if self.sent != self.step:
            self.sampler.refresh(self.sent_weights, self.sent)
        self.ready = deque(
            (PromptBatch(**r["prompts"]), int(r["epoch"]), int(r["version"]), _trajectories(r["rollout"]))
            for r in state["ready"]
        )

    def close(self) -> None:
        """Stop the sampler (its process)."""
        self.sampler.close()


def rollouts_beside_training(
    prompts: Iterable[PromptBatch],
    rollout_on: Callable[[PromptBatch, int], RolloutBatch],
    finish_on: Callable[[PromptBatch, int, Sampled], RolloutBatch],
    sample: Callable[..., Any],
    *,
    model: Any,
    grad_accum_steps: int,
    num_iterations: int,
    max_off_policy_steps: int | None,
    refresh_every: int,
) -> RolloutLoader | OffPolicyLoader:
    """The agent recipe's loader: rollouts made in the step (``max_off_policy_steps`` None: a
    :class:`RolloutLoader` calling ``rollout_on(prompts, epoch)``), or sampled beside training by a
    :class:`ProcessSampler` running `sample` and finished with ``finish_on(prompts, epoch, sampled)``.

    Raises:
        ValueError: ``num_iterations`` > 1 with rollouts beside training (a reused rollout and a lagging
            sampler are two kinds of staleness; only one is supported at a time).
    """
    if max_off_policy_steps is None:
        return RolloutLoader(
            prompts, rollout_on, grad_accum_steps=grad_accum_steps, num_iterations=num_iterations
        )
    if num_iterations != 1:
        raise ValueError(
            f"num_iterations={num_iterations} with max_off_policy_steps={max_off_policy_steps}: a rollout reused "
            "over several steps and rollouts sampled beside training cannot be combined; set num_iterations=1 "
            "or max_off_policy_steps=null."
        )
    return OffPolicyLoader(
        prompts,
        ProcessSampler(model, sample),
        finish_on,
        model=model,
        grad_accum_steps=grad_accum_steps,
        max_off_policy_steps=max_off_policy_steps,
        refresh_every=refresh_every,
    )
