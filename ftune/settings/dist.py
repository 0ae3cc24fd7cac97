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


def parallel_dims_problems(tensor_parallel_dim: Any, context_parallel_dim: Any) -> list[str]:
    """``tensor_parallel_dim`` and ``context_parallel_dim``: ints >= 1, at most one of them above 1.

    The world size is known only at the launch: ``ftune.runtime.mesh.device_mesh`` checks that it is
    a multiple of their product."""
    dims = (("tensor_parallel_dim", tensor_parallel_dim), ("context_parallel_dim", context_parallel_dim))
    out = [
        f"{key}: must be an int >= 1, got {value!r}. 1 turns it off."
        for key, value in dims
        if isinstance(value, bool) or not isinstance(value, int) or value < 1
    ]
    if not out and tensor_parallel_dim > 1 and context_parallel_dim > 1:
        out.append(
            f"tensor_parallel_dim={tensor_parallel_dim} and context_parallel_dim={context_parallel_dim}: one "
            "of the two at a time (a dp x tp or a dp x cp mesh). Set one of them to 1."
        )
    return out


def mesh_problems(world_size: int, *, tensor_parallel_dim: int, context_parallel_dim: int) -> list[str]:
    """What is wrong with a ``dp x tp x cp`` grid over `world_size` ranks (empty when nothing is)."""
    if tensor_parallel_dim > 1 and context_parallel_dim > 1:
        return [
            f"tensor_parallel_dim={tensor_parallel_dim} and context_parallel_dim={context_parallel_dim}: "
            "one of the two at a time (a dp x tp or a dp x cp mesh). Set one of them to 1."
        ]
    inner = tensor_parallel_dim * context_parallel_dim
    if world_size % inner:
        key = "tensor_parallel_dim" if tensor_parallel_dim > 1 else "context_parallel_dim"
        return [
            f"{key}={inner} does not divide the world size ({world_size} processes): the ranks form a "
            f"grid of data-parallel rows of {inner} ranks each. Launch a multiple of {inner} processes "
            f"(--nproc_per_node) or set {key} to a divisor of {world_size}."
        ]
    return []


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
