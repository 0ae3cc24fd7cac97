"""Write a benchmark's results file (benchmarks/results/*.json): rows plus where, when and how they were measured.

The one format benchmarks/figures/report.py reads to generate the docs' figures:
{"benchmark", "commit", "date", "command", "machine": {"cpu", "threads", "flags", "native_bf16",
"python", "torch"}, "note", "rows": [...]}.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ftune.runtime.hardware import cpu_flags, cpu_model, native_bf16  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict[str, Any]:
    """This machine as a results file records it (the instruction-set flags that matter for speed)."""
    flags = cpu_flags() or set()
    return {
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "flags": sorted(f for f in flags if f.startswith(("avx", "amx")) or f == "bf16"),
        "native_bf16": native_bf16(torch.device("cpu")),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def load1() -> float:
    """The machine's 1-minute load average (two decimals), recorded with a run's figures."""
    return round(os.getloadavg()[0], 2)


def commit() -> str:
    """HEAD's full hash, with `+dirty` when the code has uncommitted changes (rerun after committing).

    The results files themselves (benchmarks/results/) are not code: a benchmark run after another
    one wrote its file, before that file is committed, measured the committed code all the same.
    """
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    paths = ["ftune", "recipes", "benchmarks", ":(exclude)benchmarks/results"]
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *paths],
                           capture_output=True, text=True, cwd=ROOT).stdout.strip()  # fmt: skip
    return head + ("+dirty" if dirty else "")


def write_results(
    path: Path, benchmark: str, rows: list[dict[str, Any]], note: str = "", **extra: Any
) -> None:
    """Write `rows` with the commit, date, command line and machine of this run."""
    result = {
        "benchmark": benchmark,
        "commit": commit(),
        "date": date.today().isoformat(),
        "command": " ".join(["python", *sys.argv]),
        "machine": machine(),
        **extra,
        "note": note,
        "rows": rows,
    }
    path.write_text(json.dumps(result, indent=2) + "\n")
