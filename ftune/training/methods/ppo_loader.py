"""The PPO recipe's loader: prompt batches in, PPO micro-batches of their trajectories out.

As torchtune 0.6.1's ``ppo_full_finetune_single_device`` trains: each batch of ``batch_size`` prompts
becomes one trajectory (``rollout_on``: sample, score, value, advantages), which then serves
``ppo_epochs`` passes; each pass shuffles its rows into mini-batches of ``ppo_batch_size`` (one
optimizer step each), each split into ``grad_accum_steps`` micro-batches. The shared loop reads it
like any loader (``training.accumulate`` groups ``grad_accum_steps`` micro-batches into a step), so an
epoch of this loader is ``len(prompts) · ppo_epochs · batch_size / ppo_batch_size`` steps.

The shuffle of pass ``e`` of trajectory ``n`` is seeded by (seed, n, e) (torchtune draws it from the
global RNG), so a resumed run serves the same rows: the state holds the prompt loader's position, the
trajectory in use and how many of its micro-batches were served.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from ftune.data.prompt_batch import PromptBatch
from ftune.training.methods.ppo_trajectory import Trajectory
from ftune.training.methods.rollout_loader import VALIDATION_EPOCH

PPORolloutFn = Callable[[PromptBatch, int], Trajectory]  # (prompts, epoch) -> trajectory


def minibatch_order(seed: int, trajectory: int, ppo_epoch: int, rows: int) -> torch.Tensor:
    """``[rows]`` long: the shuffled row order of one PPO pass over a trajectory."""
    state = np.random.SeedSequence([seed, trajectory, ppo_epoch]).generate_state(2, np.uint32)
    g = torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
    return torch.randperm(rows, generator=g)


class PPOLoader:
    """Prompt batches in, PPO micro-batches out (each a row subset of a :class:`Trajectory`).

    Args:
        prompts: the prompt loader (``ftune.data.build_dataloader`` of a prompt dataset, drop_last).
        rollout_on: the recipe's ``rollout_on(prompts, epoch) -> Trajectory``.
        batch_size: prompts a trajectory (the prompt loader's batch size).
        ppo_batch_size: rows an optimizer step; divides ``batch_size``.
        ppo_epochs: passes over each trajectory.
        grad_accum_steps: micro-batches a step; divides ``ppo_batch_size``.
        seed: the run's seed (the passes' shuffles).
        kl: the KL coefficient's controller ``rollout_on`` reads; the loader updates it after each
            trajectory with its mean summed KL, and saves its β with its state (a resumed run's
            trajectories use the β an unbroken run would); None: nothing to update.

    Raises:
        ValueError: sizes that do not divide, or a count below 1.
    """

    def __init__(
        self,
        prompts: Any,
        rollout_on: PPORolloutFn,
        *,
        batch_size: int,
        ppo_batch_size: int,
        ppo_epochs: int,
        grad_accum_steps: int,
        seed: int,
        kl: Any = None,
    ) -> None:
        sizes = {"batch_size": batch_size, "ppo_batch_size": ppo_batch_size, "ppo_epochs": ppo_epochs,
                 "grad_accum_steps": grad_accum_steps}  # fmt: skip
        for name, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PPOLoader: {name} must be an int >= 1, got {value!r}.")
        if batch_size % ppo_batch_size or ppo_batch_size % grad_accum_steps:
            raise ValueError(
                f"PPOLoader: batch_size ({batch_size}) must be a multiple of ppo_batch_size ({ppo_batch_size}), and "
                f"ppo_batch_size of grad_accum_steps ({grad_accum_steps}): a trajectory splits into whole "
                "optimizer steps, a step into equal micro-batches. E.g. ppo_batch_size=batch_size."
            )
        self.prompts, self.rollout_on, self.seed, self.kl = prompts, rollout_on, seed, kl
        self.batch_size, self.ppo_epochs = batch_size, ppo_epochs
        self.micro = ppo_batch_size // grad_accum_steps
        self.per_trajectory = ppo_epochs * (batch_size // self.micro)  # micro-batches a trajectory
        self.current: Trajectory | None = None
        self.number = 0  # trajectories made so far (the shuffles' seed)
        self.served = 0  # micro-batches of the current trajectory served
        self.seconds = 0.0

    def __len__(self) -> int:
        """Micro-batches per epoch."""
        return len(self.prompts) * self.per_trajectory

    def _micro_batches(self) -> Iterator[Trajectory]:
        """The rest of the current trajectory's micro-batches."""
        assert self.current is not None
        while self.served < self.per_trajectory:
            per_pass = self.per_trajectory // self.ppo_epochs
            ppo_epoch, k = divmod(self.served, per_pass)
            order = minibatch_order(self.seed, self.number - 1, ppo_epoch, self.current.rows)
            rows = order[k * self.micro : (k + 1) * self.micro].to(self.current.tokens.device)
            self.served += 1
            yield self.current.select(rows)
        self.current = None

    def __iter__(self) -> Iterator[Trajectory]:
        if self.current is not None:
            yield from self._micro_batches()  # resumed inside a trajectory: finish it first
        epoch = self.prompts.state_dict()["epoch"]
        for prompts in self.prompts:
            start = time.perf_counter()
            self.current, self.served = self.rollout_on(prompts, epoch), 0
            self.number += 1
            if self.kl is not None:  # β of the next trajectory (Ziegler et al.: after each batch)
                self.kl.update(float(self.current.kl.mean()), self.current.rows)
            self.seconds += time.perf_counter() - start
            if self.current.rows != self.batch_size:
                raise ValueError(
                    f"PPOLoader: a trajectory has {self.current.rows} rows, not batch_size={self.batch_size}: "
                    "the prompt loader must drop an epoch's last short batch (drop_last=True)."
                )
            yield from self._micro_batches()

    @staticmethod
    def for_validation(prompts: Any, rollout_on: PPORolloutFn) -> _Validation | None:
        """Validation: one trajectory a prompt batch of ``dataset_val``, sampled with the same draws at every
        pass (None stays None). Its loss is PPO's at ratio 1 (the policy that sampled): it logs the scores,
        the KL and the value loss of held-out prompts."""
        if prompts is None:
            return None
        return _Validation(prompts, rollout_on)

    def take_seconds(self) -> dict[str, float]:
        """``{"time/rollout_s": ...}``: seconds spent making trajectories since the last call."""
        seconds, self.seconds = self.seconds, 0.0
        return {"time/rollout_s": seconds}

    def close(self) -> None:
        """Nothing to stop: trajectories are made in the step."""

    def state_dict(self) -> dict[str, Any]:
        """{"epoch", "prompts", "number", "served", "current", "kl"}: resume serves the same rows."""
        prompts = self.prompts.state_dict()
        return {
            "epoch": prompts["epoch"],
            "prompts": prompts,
            "number": self.number,
            "served": self.served,
            "current": self.current.state() if self.current is not None else None,
            "kl": None if self.kl is None else self.kl.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = [k for k in ("prompts", "number", "served", "current") if k not in state]
        if missing:
            raise KeyError(
                f"PPOLoader.load_state_dict: the saved state lacks {missing} (keys: {sorted(state)}): it was not "
                "written by a PPO recipe. Resume from a step folder ppo_full_finetune_single_device saved."
            )
        self.prompts.load_state_dict(state["prompts"])
        self.number, self.served = int(state["number"]), int(state["served"])
        self.current = None if state["current"] is None else Trajectory.from_state(state["current"])
        if self.kl is not None and state.get("kl") is not None:
            self.kl.load_state_dict(state["kl"])


class _Validation:
    """The validation prompts' trajectories, made anew at each pass with the same draws."""

    def __init__(self, prompts: Any, rollout_on: PPORolloutFn) -> None:
        self.prompts, self.rollout_on = prompts, rollout_on

    def __len__(self) -> int:
        return len(self.prompts)

    def __iter__(self) -> Iterator[Trajectory]:
        for prompts in self.prompts:
            yield self.rollout_on(prompts, VALIDATION_EPOCH)
