"""Training curves from DiskLogger files: loss, validation loss, learning rate, tokens/s and peak memory
(and for online RL runs the reward and the completions' length).

    runs = {"lora": read_metrics("output/lora"), "full": read_metrics("output/full/logs/metrics_1.jsonl")}
    figure, drawn = draw(runs)           # drawn: panel -> run -> number of points plotted
    figure.savefig("plot.png")

matplotlib is an optional dependency (`pip install 'ftune[plot]'`); it is imported only here, when
a plot is drawn.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftune.checkpointing.output_guard import check_output_file

logger = logging.getLogger(__name__)

DEFAULT_NAME = "plot.png"  # the file written into a folder given as the output

# (panel title, [(metric key in the log, line style)], y-axis label); validation loss shares the loss panel.
PANELS: list[tuple[str, list[tuple[str, str]], str]] = [
    ("loss", [("loss", "-"), ("val_loss", "--")], "loss (solid: train, dashed: validation)"),
    ("learning rate", [("lr", "-")], "lr"),
    ("tokens/s", [("tokens_per_second", "-")], "tokens/s"),
    ("peak memory", [("peak_memory_gib", "-")], "GiB"),
]
# Online RL runs (GRPO: they log "reward") get two more panels: the sampled and held-out reward, and
# the completions' length.
RL_PANELS: list[tuple[str, list[tuple[str, str]], str]] = [
    ("reward", [("reward", "-"), ("val_reward", "--")], "mean reward (solid: sampled, dashed: validation)"),
    ("completion length", [("completions/mean_length", "-")], "tokens"),
]
Series = dict[str, list[tuple[int, float]]]


def log_files(path: str | Path) -> list[Path]:
    """The JSONL files of a run: `path` itself, or `<output_dir>/logs/*.jsonl`, or `<dir>/*.jsonl`.

    Raises:
        FileNotFoundError: when `path` does not exist or holds no .jsonl file, saying where it looked.
    """
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(
            f"{path} does not exist. Give a run's output_dir (its logs/ holds the DiskLogger files) "
            "or a metrics .jsonl file."
        )
    files = sorted((path / "logs").glob("*.jsonl")) or sorted(path.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(
            f"no metrics in {path}: looked for {path / 'logs'}/*.jsonl and {path}/*.jsonl. Runs write them "
            "with metric_logger._component_=ftune.training.DiskLogger (the shipped configs do)."
        )
    return files


def read_metrics(path: str | Path, warn: Callable[[str], None] | None = None) -> Series:
    """Every numeric metric of a run, as metric -> [(step, value)] sorted by step.

    Several files (a resumed run starts a new one) are read in name order; a step logged twice
    keeps its last value. A file's last line that is not JSON is torn (a run killed while writing
    it, e.g. by kill -9): it is skipped, with one warning naming the file and line.

    Args:
        path: a run's output_dir or a metrics .jsonl file.
        warn: called with the warning about a skipped torn line; default: this module's logger.

    Raises:
        FileNotFoundError: see `log_files`.
        ValueError: a line before the last that is not JSON, or a line that is not a JSON object
            with an integer "step" (names the file and line).
    """
    values: dict[str, dict[int, float]] = {}
    for file in log_files(path):
        lines = file.read_text(encoding="utf-8").splitlines()
        last = max((i for i, line in enumerate(lines, start=1) if line.strip()), default=0)
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                if number == last:
                    (warn or logger.warning)(
                        f"skipped {file}:{number}, a torn last line (the run was killed while writing it): "
                        f"{line[:80]!r}"
                    )
                    continue
                raise ValueError(
                    f"{file}:{number} is not JSON ({e}): {line[:80]!r}. Only a file's last line may be torn "
                    "(a killed run); fix or delete this line."
                ) from e
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise ValueError(f"{file}:{number} has no integer 'step': {line[:80]!r}")
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    values.setdefault(key, {})[record["step"]] = float(value)
    return {key: sorted(points.items()) for key, points in values.items()}


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError(
            "plotting needs matplotlib, which is not installed. Install it with "
            "`pip install 'ftune[plot]'` (or `pip install matplotlib`)."
        ) from e
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def draw(runs: dict[str, Series]) -> tuple[Any, dict[str, dict[str, int]]]:
    """One figure, a panel per quantity, every run overlaid in its own colour.

    Args:
        runs: label -> the run's metrics (`read_metrics`).

    Returns:
        (the matplotlib Figure, panel title -> run label -> points drawn). A run that never
        logged a quantity (no validation, no peak memory on this device) is left out of that panel.

    Raises:
        ImportError: matplotlib missing, with the pip command.
        ValueError: no run, or no run with any of the plotted metrics.
    """
    if not runs:
        raise ValueError("nothing to plot: give at least one run.")
    plt = _pyplot()
    panels = PANELS + (RL_PANELS if any("reward" in series for series in runs.values()) else [])
    rows = len(panels) // 2
    figure, axes = plt.subplots(rows, 2, figsize=(11, 3.5 * rows), constrained_layout=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn: dict[str, dict[str, int]] = {}
    for ax, (title, metrics, ylabel) in zip(axes.flat, panels):
        counts: dict[str, int] = {}
        for i, (label, series) in enumerate(runs.items()):
            for key, style in metrics:
                points = series.get(key, [])
                if not points:
                    continue
                steps, ys = zip(*points)
                marker = "o" if len(points) < 20 and key.startswith("val_") else None
                name = label if key == metrics[0][0] else f"{label} ({key})"
                ax.plot(steps, ys, style, color=colours[i % len(colours)], marker=marker, label=name)
                counts[name] = len(points)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if counts:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        drawn[title] = counts
    if not any(drawn.values()):
        plt.close(figure)
        wanted = [key for _, metrics, _ in panels for key, _ in metrics]
        raise ValueError(f"none of the runs {list(runs)} logged any of {wanted}.")
    return figure, drawn


def output_file(output: str | Path) -> Path:
    """The file a plot given `output` is written to: `output/plot.png` when `output` is an existing
    folder, `output` + ".png" when it has no extension (what matplotlib writes), else `output`."""
    output = Path(output)
    if output.is_dir():
        return output / DEFAULT_NAME
    return output if output.suffix else output.with_name(output.name + ".png")


def plot_runs(
    paths: list[str | Path],
    output: str | Path,
    labels: list[str] | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict:
    """Read each run, draw them overlaid and write the PNG; returns what `draw` drew.

    Args:
        paths: output_dirs or .jsonl files.
        output: the PNG to write (its folder is created); see `output_file` for a folder or a
            name without extension. Never one of the metrics files read.
        labels: one per path; default: each run's folder name (the path when names repeat).
        warn: gets the warning about a torn last line (see `read_metrics`).

    Raises:
        ValueError: when `labels` does not match `paths` in number, or `output` is a metrics file read.
    """
    output = output_file(output)
    inputs = {
        f"{f.name}, a metrics file of run {i + 1}": f for i, p in enumerate(paths) for f in _files_or_none(p)
    }
    check_output_file(output, option="-o/--output", force=True, inputs=inputs)
    if labels is not None and len(labels) != len(paths):
        raise ValueError(f"{len(labels)} labels for {len(paths)} runs: give one label per run.")
    if labels is None:
        labels = [_default_label(Path(p)) for p in paths]
        if len(set(labels)) < len(labels):
            labels = [str(p) for p in paths]
    runs = {label: read_metrics(path, warn) for label, path in zip(labels, paths)}
    figure, drawn = draw(runs)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)
    _pyplot().close(figure)
    return drawn


def _files_or_none(path: str | Path) -> list[Path]:
    try:
        return log_files(path)
    except FileNotFoundError:
        return []  # reported when the run is read


def _default_label(path: Path) -> str:
    if path.is_file():  # output_dir/logs/metrics_1.jsonl -> output_dir's name
        return path.parent.parent.name if path.parent.name == "logs" else path.stem
    return path.resolve().name
