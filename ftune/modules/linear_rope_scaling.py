"""Linear ("position interpolation") RoPE scaling: every frequency divided by one factor."""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LinearRopeScaling:
    """HF `rope_type: linear` (Chen et al., 2023): inv_freq / factor, i.e. positions divided by
    `factor`. Gemma 3 4B/12B/27B use it (factor 8) on their global-attention layers only.

    Args:
        factor: the divisor (> 0).
    """

    factor: float

    def __post_init__(self) -> None:
        if not self.factor > 0:
            raise ValueError(
                f"LinearRopeScaling: factor must be > 0, got {self.factor}; Gemma 3 4B uses 8.0."
            )

    def apply(self, inv_freq: torch.Tensor) -> torch.Tensor:
        """Return the scaled inverse frequencies (same shape as `inv_freq`)."""
        return inv_freq / self.factor
