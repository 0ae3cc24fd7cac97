"""Helpers of the figure renderers (report.py): read a results file, format a table, say where it was measured."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def provenance(*names: str, up: str = "../") -> str:
    """The closing line of a block: each results file (linked `up` from the page), machine, commit, date."""
    parts = []
    for name in names:
        r = load(name)
        commits = sorted({row.get("commit", r["commit"])[:7] for row in r["rows"]} | {r["commit"][:7]})
        parts.append(
            f"[{name}.json]({up}benchmarks/results/{name}.json): {r['machine']['cpu']}, torch "
            f"{r['machine']['torch']}, commit {', '.join(commits)}, {r['date']}"
        )
    return "Measured on " + "; ".join(parts) + "."


def table(header: list[str], rows: list[list[object]], align: str) -> str:
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def throughput_row(method: str, dtype: str, compile_: str) -> dict:
    (row,) = [
        r
        for r in load("train_throughput")["rows"]
        if (r["method"], r["dtype"], r["compile"]) == (method, dtype, compile_)
    ]
    return row


def minutes(seconds: int) -> str:
    return f"{seconds // 60} min {seconds % 60} s"


def span(values: list[float], fmt: str = ".2f", unit: str = "") -> str:
    low, high = min(values), max(values)
    return (
        f"{low:{fmt}}{unit}-{high:{fmt}}{unit}" if f"{low:{fmt}}" != f"{high:{fmt}}" else f"{low:{fmt}}{unit}"
    )


def lr_text(x: float) -> str:
    """A learning rate as written on a command line: 2e-4, not 0.0002."""
    return f"{x:.0e}".replace("e-0", "e-")
