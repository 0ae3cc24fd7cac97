"""The dist_check recipe's scalars (it checks a distributed launch), declared once."""

from __future__ import annotations

from dataclasses import dataclass

from ftune.config.settings import Settings, setting


@dataclass
class DistCheckSettings(Settings):
    """The dist_check recipe."""

    backend: str | None = setting(None, "process-group backend (null: gloo on CPU, nccl on CUDA)")
    fail_rank: int | None = setting(
        None, "make this rank exit with an error (to test how launch failures surface)"
    )
