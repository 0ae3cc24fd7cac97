"""Tokens per second over a sliding window of recent steps."""

import time
from collections import deque
from collections.abc import Callable


class Throughput:
    """Measure tokens/s over the last ``window`` steps.

    Call :meth:`update` once per step with the tokens it processed; call :meth:`reset` after
    anything that should not count as training time (validation, checkpointing).

    Args:
        window: number of recent steps the rate is averaged over.
        clock: time source in seconds (injectable for tests).

    Raises:
        ValueError: if ``window`` is not a positive int.
    """

    def __init__(self, window: int = 10, *, clock: Callable[[], float] = time.perf_counter) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"Throughput: window must be a positive int, got {window!r}.")
        self._clock = clock
        # (time, tokens) marks; the oldest one only provides the window's start time.
        self._marks: deque[tuple[float, int]] = deque(maxlen=window + 1)
        self.reset()

    def reset(self) -> None:
        """Forget past steps; the next window starts now."""
        self._marks.clear()
        self._marks.append((self._clock(), 0))

    def update(self, num_tokens: int) -> float:
        """Record a finished step and return the current rate.

        Args:
            num_tokens: tokens processed by the step that just finished.

        Returns:
            Tokens per second over the window (0.0 if no time has passed).
        """
        self._marks.append((self._clock(), num_tokens))
        elapsed = self._marks[-1][0] - self._marks[0][0]
        tokens = sum(n for _, n in list(self._marks)[1:])
        return tokens / elapsed if elapsed > 0 else 0.0
