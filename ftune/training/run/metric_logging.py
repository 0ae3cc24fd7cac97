"""Metric loggers: stdout, a JSONL file, TensorBoard and Weights & Biases, all with one interface.

Each is a config component (``_component_: ftune.training.DiskLogger``, ``log_dir: ...``) with::

    log(name, value, step)   log_dict({name: value, ...}, step)   close()

Only rank 0 writes; on other ranks every logger is a no-op, so recipes call them unconditionally.
"""

import json
import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import torch

from ftune.runtime.rank import is_rank_zero

logger = logging.getLogger(__name__)

Scalar = float | int | torch.Tensor


def _scalar(value: Scalar) -> float | int:
    return value.item() if isinstance(value, torch.Tensor) else value


def _missing(name: str, package: str, extra: str) -> ImportError:
    return ImportError(
        f"{name} needs the `{package}` package, which is not installed. "
        f"Install it with `pip install 'ftune[{extra}]'` (or `pip install {package}`), "
        "or use metric_logger._component_=ftune.training.DiskLogger."
    )


class MetricLogger:
    """Base class: ``log`` goes through ``log_dict``; subclasses implement ``_write`` and ``_close``."""

    def __init__(self) -> None:
        self._enabled = is_rank_zero()
        self._closed = False

    def log(self, name: str, value: Scalar, step: int) -> None:
        """Record one scalar.

        Args:
            name: metric name, e.g. ``"loss"``.
            value: a number or a one-element tensor.
            step: the optimizer step it belongs to.
        """
        self.log_dict({name: value}, step)

    def log_dict(self, metrics: Mapping[str, Scalar], step: int) -> None:
        """Record several scalars of one step.

        Args:
            metrics: name -> number or one-element tensor.
            step: the optimizer step they belong to.
        """
        if self._closed:
            raise ValueError(f"{type(self).__name__} is closed; create a new one to log again.")
        if self._enabled:
            self._write({k: _scalar(v) for k, v in metrics.items()}, step)

    def _write(self, metrics: dict[str, float | int], step: int) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        pass

    def close(self) -> None:
        """Flush and release the logger's resources; later calls to ``log`` raise. Idempotent."""
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> "MetricLogger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StdoutLogger(MetricLogger):
    """One line per call on stdout: ``step 10 | loss 2.3456 | lr 0.0001``.

    Args:
        stream: where to write; defaults to ``sys.stdout`` at write time.
    """

    def __init__(self, *, stream: TextIO | None = None) -> None:
        super().__init__()
        self._stream = stream

    def _write(self, metrics: dict[str, float | int], step: int) -> None:
        parts = [f"step {step}"] + [
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()
        ]
        stream = self._stream or sys.stdout
        stream.write(" | ".join(parts) + "\n")
        stream.flush()


class DiskLogger(MetricLogger):
    """Append one JSON object per call to ``log_dir/filename``: ``{"step": 10, "loss": 2.34, ...}``.

    The file is opened in append mode, so a resumed run continues the same file, and flushed
    after each line, so a crash loses nothing already logged.

    Args:
        log_dir: directory for the file; created if missing.
        filename: defaults to ``metrics_<unix time>.jsonl``.
    """

    def __init__(self, log_dir: str | Path, *, filename: str | None = None) -> None:
        super().__init__()
        self.path = Path(log_dir) / (filename or f"metrics_{int(time.time())}.jsonl")
        self._file: TextIO | None = None
        if self._enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
            logger.info("Writing metrics to %s", self.path)

    def _write(self, metrics: dict[str, float | int], step: int) -> None:
        self._file.write(json.dumps({"step": step, **metrics}) + "\n")
        self._file.flush()

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()


class TensorBoardLogger(MetricLogger):
    """Scalars to TensorBoard event files in ``log_dir`` (needs ``pip install 'ftune[tensorboard]'``).

    Args:
        log_dir: directory for the event files.

    Raises:
        ImportError: if the ``tensorboard`` package is missing, naming the pip extra.
    """

    def __init__(self, log_dir: str | Path) -> None:
        super().__init__()
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise _missing("TensorBoardLogger", "tensorboard", "tensorboard") from e
        self._writer = SummaryWriter(log_dir=str(log_dir)) if self._enabled else None

    def _write(self, metrics: dict[str, float | int], step: int) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, global_step=step)

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class WandBLogger(MetricLogger):
    """Scalars to a Weights & Biases run (needs ``pip install 'ftune[wandb]'``).

    Args:
        project: W&B project name.
        entity: W&B team or user; None uses your default.
        name: run name; None lets W&B pick one.
        log_dir: where W&B keeps its local files.
        config: run configuration to record (e.g. the resolved YAML as a dict).

    Raises:
        ImportError: if the ``wandb`` package is missing, naming the pip extra.
    """

    def __init__(
        self,
        project: str,
        *,
        entity: str | None = None,
        name: str | None = None,
        log_dir: str | Path | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        try:
            import wandb
        except ImportError as e:
            raise _missing("WandBLogger", "wandb", "wandb") from e
        self._run = None
        if self._enabled:
            self._run = wandb.init(
                project=project,
                entity=entity,
                name=name,
                dir=None if log_dir is None else str(log_dir),
                config=config,
            )

    def _write(self, metrics: dict[str, float | int], step: int) -> None:
        self._run.log(metrics, step=step)

    def _close(self) -> None:
        if self._run is not None:
            self._run.finish()
