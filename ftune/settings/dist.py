"""The dist_check recipe's scalars (it checks a distributed launch), declared once."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ftune.config.settings import Settings, setting

# Below one second gloo may fail to connect every pair of ranks at start-up on a busy machine
# (0.01 s fails every time with "Gloo connectFullMesh failed ... timed out connecting"), and a
# collective that waits for a checkpoint save needs far longer still.
MIN_DIST_TIMEOUT_S = 1.0


def dist_timeout_problems(value: Any) -> list[str]:
    """``dist_timeout_s`` must be a finite number of seconds >= `MIN_DIST_TIMEOUT_S`; the problem, or none."""
    if isinstance(value, (int, float)) and math.isfinite(value) and value >= MIN_DIST_TIMEOUT_S:
        return []
    return [
        f"dist_timeout_s: must be a finite number of seconds >= {MIN_DIST_TIMEOUT_S:g}, got {value!r}. The "
        "ranks must connect to each other within it, and every collective (a barrier while rank 0 saves a "
        "checkpoint) must finish within it. The default is 1800; use a few seconds only to test a hang."
    ]


@dataclass
class DistCheckSettings(Settings):
    """The dist_check recipe."""

    backend: str | None = setting(None, "process-group backend (null: gloo on CPU, nccl on CUDA)")
    fail_rank: int | None = setting(
        None, "make this rank exit with an error (to test how launch failures surface)"
    )
    hang_rank: int | None = setting(
        None,
        "make this rank sleep 10 x dist_timeout_s instead of joining the all-reduce (to test the timeout)",
    )
    dist_timeout_s: float = setting(
        1800.0, "seconds a rank waits for the others in a collective before the run fails"
    )

    def problems(self) -> list[str]:
        return dist_timeout_problems(self.dist_timeout_s)
