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
    hang_rank: int | None = setting(
        None,
        "make this rank sleep 10 x dist_timeout_s instead of joining the all-reduce (to test the timeout)",
    )
    dist_timeout_s: float = setting(
        1800.0, "seconds a rank waits for the others in a collective before the run fails"
    )

    def problems(self) -> list[str]:
        if self.dist_timeout_s > 0:
            return []
        return [f"dist_timeout_s: must be > 0 (seconds), got {self.dist_timeout_s!r}. The default is 1800."]
