"""What the demo benchmarks that start from the quickstart's SFT model share (reward_demo.py,
grpo_demo.py): their first command-line arguments and the rows of a run's logs."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from results_file import ROOT


def demo_parser(description: str, out_name: str) -> argparse.ArgumentParser:
    """A parser with --home (FTUNE_HOME, default ~/.cache/ftune), --sft-merged and --out (default
    output/<out_name> in the repository); the script adds its own arguments after these."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "~/.cache/ftune")))
    parser.add_argument(
        "--sft-merged", type=Path, help="an SFT model folder (default: run the quickstart's SFT)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "output" / out_name)
    return parser


def log_rows(run_dir: Path) -> list[dict]:
    """Every row of the JSON-lines logs under `run_dir`/logs, file by file in name order."""
    return [json.loads(line) for f in sorted((run_dir / "logs").glob("*.jsonl"))
            for line in f.read_text().splitlines() if line.strip()]  # fmt: skip
