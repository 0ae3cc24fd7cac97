"""A tqdm progress bar for the training loop; silent on every rank but 0."""

from tqdm.auto import tqdm

from ftune.runtime.rank import is_rank_zero


class ProgressBar:
    """Progress over optimizer steps, showing loss, LR, tokens/s and peak memory.

    Usable as a context manager (closes itself). Disabled on non-zero ranks and when
    ``enabled`` is False, so a recipe calls it unconditionally.

    Args:
        total_steps: steps of the whole run.
        initial_step: steps already done (when resuming).
        enabled: False hides the bar (e.g. in CI logs).
    """

    def __init__(self, total_steps: int, *, initial_step: int = 0, enabled: bool = True) -> None:
        self._bar = tqdm(
            total=total_steps,
            initial=initial_step,
            disable=not (enabled and is_rank_zero()),
            dynamic_ncols=True,
            unit="step",
        )

    @property
    def disabled(self) -> bool:
        """True when nothing is shown."""
        return self._bar.disable

    def update(
        self,
        step: int,
        *,
        loss: float,
        lr: float,
        tokens_per_second: float | None = None,
        peak_memory_gib: float | None = None,
    ) -> None:
        """Move the bar to ``step`` and show the step's numbers.

        Args:
            step: optimizer steps done so far (the bar position).
            loss: the step's loss.
            lr: the step's learning rate.
            tokens_per_second: throughput, if measured.
            peak_memory_gib: peak memory, if measured.
        """
        if self._bar.disable:
            return
        postfix = {"loss": f"{loss:.4f}", "lr": f"{lr:.2e}"}
        if tokens_per_second is not None:
            postfix["tok/s"] = f"{tokens_per_second:.0f}"
        if peak_memory_gib is not None:
            postfix["mem"] = f"{peak_memory_gib:.2f}GiB"
        self._bar.set_description(f"step {step}")
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(step - self._bar.n)

    def close(self) -> None:
        """Close the bar (idempotent)."""
        self._bar.close()

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
