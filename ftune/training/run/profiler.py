"""A ``torch.profiler`` context for the training loop that costs nothing when disabled.

Config component::

    profiler:
      _component_: ftune.training.Profiler
      enabled: true
      output_dir: ${output_dir}/profiles
      wait: 1
      warmup: 1
      active: 2

Recipe::

    with config.instantiate(cfg.profiler) as prof:
        for ...:
            ...  # the training step
            prof.step()
"""

import logging
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

logger = logging.getLogger(__name__)


class Profiler:
    """Profile a window of training steps and write Chrome/TensorBoard traces to ``output_dir``.

    The schedule skips ``wait`` steps, warms up for ``warmup`` steps, then records ``active``
    steps, ``repeat`` times (0 repeats until the loop ends). Disabled, ``step()`` does nothing.

    Args:
        enabled: False makes the whole object a no-op.
        output_dir: where traces go (``*.pt.trace.json``, viewable in Perfetto or TensorBoard).
        wait: steps to skip before each cycle.
        warmup: steps profiled but discarded (profiler start-up cost).
        active: steps recorded per cycle.
        repeat: number of cycles.
        record_shapes: record operator input shapes.
        profile_memory: record tensor allocations.
        with_stack: record Python stacks (large traces).

    Raises:
        ValueError: if a schedule count is negative or ``active`` is 0 while enabled.
    """

    def __init__(
        self,
        *,
        enabled: bool = False,
        output_dir: str | Path = "profiles",
        wait: int = 1,
        warmup: int = 1,
        active: int = 2,
        repeat: int = 1,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
    ) -> None:
        counts = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
        bad = {k: v for k, v in counts.items() if not isinstance(v, int) or isinstance(v, bool) or v < 0}
        if enabled and (bad or active == 0):
            raise ValueError(
                f"Profiler: wait, warmup, active and repeat must be ints >= 0 and active >= 1; got {counts}."
            )
        self.enabled = enabled
        self.output_dir = Path(output_dir)
        self._profile: profile | None = None
        if enabled:
            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            self._profile = profile(
                activities=activities,
                schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=repeat),
                on_trace_ready=tensorboard_trace_handler(str(self.output_dir)),
                record_shapes=record_shapes,
                profile_memory=profile_memory,
                with_stack=with_stack,
            )

    def __enter__(self) -> "Profiler":
        if self._profile is not None:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            self._profile.__enter__()
            logger.info("Profiling; traces go to %s", self.output_dir)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._profile is not None:
            self._profile.__exit__(*exc)

    def step(self) -> None:
        """Mark the end of a training step (advances the schedule)."""
        if self._profile is not None:
            self._profile.step()
