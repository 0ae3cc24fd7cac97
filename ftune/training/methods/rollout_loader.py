"""The GRPO recipes' loader: prompt batches in, scored rollout micro-batches out, and the time they took.

A GRPO recipe wraps its prompt loader in a :class:`RolloutLoader` with its own ``rollout_on(prompts,
number) -> RolloutBatch``; the shared loop then reads it like any loader (``training.accumulate``,
``total_steps``, ``restore``, ``save_checkpoint``). With ``num_iterations = k > 1`` the loader
samples one step's ``grad_accum_steps`` micro-batches, then serves them k times: k optimizer steps
on one rollout, the later ones with a clipped ratio against the log-probabilities kept at sampling.

The loader times what it makes: :meth:`RolloutLoader.take_seconds` is the wall time this rank spent
making rollouts (sampling, scoring, old and reference log-probabilities) since it was last read, which
a recipe logs with its step as ``time/rollout_s`` (a timing, not a loss metric: nothing divides it).

Resume is exact: the state holds the prompt loader's position (its epoch, with the run's seed and
each prompt's dataset index, seeds the prompt's sampling, so no generator state is needed) and a
rollout still to be reused (its tensors). A prompt's completions depend on (seed, epoch, index)
only: not on the batch size, the accumulation or the world size.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ftune.data.prompt_batch import PromptBatch
from ftune.training.methods.rollout_batch import RolloutBatch

logger = logging.getLogger(__name__)

RolloutFn = Callable[[PromptBatch, int], RolloutBatch]  # (prompts, epoch) -> micro-batch
# The "epoch" validation rollouts are seeded with: their draws are the same at every pass and never
# those of a training epoch.
VALIDATION_EPOCH = (1 << 31) - 1


class RolloutLoader:
    """Prompt batches in, :class:`RolloutBatch` micro-batches out (``rollout_on`` makes each one).

    Args:
        prompts: the prompt loader (``ftune.data.build_dataloader`` of a prompt dataset; a plain
            iterable for validation).
        rollout_on: the recipe's ``rollout_on(prompts, epoch)``.
        grad_accum_steps: micro-batches per optimizer step (a reused rollout is one step's worth).
        num_iterations: optimizer steps per rollout.
        validation: a validation loader: every pass samples the same completions, and it has no state.
    """

    def __init__(
        self,
        prompts: Iterable[PromptBatch],
        rollout_on: RolloutFn,
        *,
        grad_accum_steps: int,
        num_iterations: int,
        validation: bool = False,
    ) -> None:
        for name, value in (("grad_accum_steps", grad_accum_steps), ("num_iterations", num_iterations)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RolloutLoader: {name} must be an int >= 1, got {value!r}.")
        self.prompts, self.rollout_on = prompts, rollout_on
        self.accum, self.iterations, self.validation = grad_accum_steps, num_iterations, validation
        self.reuse: list[RolloutBatch] = []  # a step's rollout still to be served again
        self.passes_left = 0
        self.seconds = 0.0  # spent making rollouts since take_seconds() last read it
        dropped = len(prompts) % grad_accum_steps if num_iterations > 1 and hasattr(prompts, "__len__") else 0
        if dropped:
            logger.warning(
                "num_iterations=%d reuses whole steps of %d micro-batches: the last %d prompt batch(es) of "
                "each epoch (%d batches) do not fill a step and are skipped. Make the number of prompt "
                "batches a multiple of grad_accum_steps to use them.",
                num_iterations, grad_accum_steps, dropped, len(prompts),
            )  # fmt: skip

    @classmethod
    def for_validation(
        cls, prompts: Iterable[PromptBatch] | None, rollout_on: RolloutFn
    ) -> RolloutLoader | None:
        """The validation loader's rollouts (None stays None): the same draws at every pass."""
        if prompts is None:
            return None
        return cls(prompts, rollout_on, grad_accum_steps=1, num_iterations=1, validation=True)

    def __len__(self) -> int:
        """Micro-batches per epoch."""
        n = len(self.prompts)  # type: ignore[arg-type]
        return n if self.iterations == 1 else (n // self.accum) * self.accum * self.iterations

    def __iter__(self) -> Iterator[RolloutBatch]:
        if self.validation:
            for prompts in self.prompts:
                yield self.rollout_on(prompts, VALIDATION_EPOCH)
            return
        yield from self._reuse_passes()  # resumed inside a reused rollout: serve it first
        # The epoch these prompts belong to (a loader saved at an epoch's end has moved on already).
        epoch = self.prompts.state_dict()["epoch"]  # type: ignore[attr-defined]
        if self.iterations == 1:
            for prompts in self.prompts:
                yield self._timed(prompts, epoch)
            return
        group: list[PromptBatch] = []
        for prompts in self.prompts:
            group.append(prompts)
            if len(group) < self.accum:
                continue
            made = [self._timed(p, epoch) for p in group]
            group, self.reuse, self.passes_left = [], made, self.iterations - 1
            yield from made
            yield from self._reuse_passes()
        self.reuse = []

    def _reuse_passes(self) -> Iterator[RolloutBatch]:
        """The passes still owed over the kept rollout, the count kept current for `state_dict`."""
        while self.passes_left:
            self.passes_left -= 1
            yield from self.reuse

    def _timed(self, prompts: PromptBatch, epoch: int) -> RolloutBatch:
        start = time.perf_counter()
        batch = self.rollout_on(prompts, epoch)
        self.seconds += time.perf_counter() - start
        return batch

    def take_seconds(self) -> dict[str, float]:
        """``{"time/rollout_s": ...}``: this rank's seconds spent making rollouts since the last call (0
        for a step that reuses a rollout), then restart the count. A recipe logs it with the step."""
        seconds, self.seconds = self.seconds, 0.0
        return {"time/rollout_s": seconds}

    def close(self) -> None:
        """Nothing to stop: rollouts are made in the step (``OffPolicyLoader.close`` stops its worker)."""

    def state_dict(self) -> dict[str, Any]:
        """{"epoch", "prompts" (the prompt loader's position), "passes_left", "reuse"}."""
        prompts = self.prompts.state_dict()  # type: ignore[attr-defined]
        return {
            "epoch": prompts["epoch"],
            "prompts": prompts,
            "passes_left": self.passes_left,
            "reuse": [b.state() for b in self.reuse] if self.passes_left else [],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = [k for k in ("prompts", "passes_left", "reuse") if k not in state]
        if missing:
            raise KeyError(
                f"RolloutLoader.load_state_dict: the saved state lacks {missing} (keys: {sorted(state)}): it was "
                "not written by a GRPO recipe. Resume from a step folder a GRPO recipe saved."
            )
        self.prompts.load_state_dict(state["prompts"])  # type: ignore[attr-defined]
        self.passes_left = int(state["passes_left"])
        self.reuse = [RolloutBatch.from_state(b) for b in state["reuse"]]
