"""`ftune plot`: training curves of one or several runs in one PNG (loss, val loss, lr, tokens/s, peak memory)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ftune.training.run.plotting import DEFAULT_NAME, output_file, plot_runs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="ftune plot",
        description="Plot loss, validation loss, learning rate, tokens/s and peak memory against step. "
        "Several runs are overlaid (e.g. full vs LoRA vs QAT). Needs matplotlib: pip install 'ftune[plot]'.",
    )
    parser.add_argument("runs", nargs="+", type=Path, help="a run's output_dir, or a metrics .jsonl file")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help="PNG to write, or an existing folder to write plot.png into (default: <output_dir>/plot.png for "
        "one run, else plot.png); a name without extension gets .png",
    )
    parser.add_argument("--labels", help="comma-separated legend labels, one per run (default: folder names)")
    args = parser.parse_args(argv)

    output = output_file(
        args.output
        or (
            args.runs[0] / DEFAULT_NAME
            if len(args.runs) == 1 and args.runs[0].is_dir()
            else Path(DEFAULT_NAME)
        )
    )
    labels = args.labels.split(",") if args.labels else None
    try:
        drawn = plot_runs(
            args.runs, output, labels, warn=lambda m: print(f"ftune plot: warning: {m}", file=sys.stderr)
        )
    except (FileNotFoundError, ValueError, ImportError) as e:
        parser.exit(1, f"ftune plot: error: {e}\n")
    panels = ", ".join(
        f"{title} ({len(lines)} line{'s' * (len(lines) != 1)})" for title, lines in drawn.items()
    )
    print(f"wrote {output}: {panels}")
    return 0
