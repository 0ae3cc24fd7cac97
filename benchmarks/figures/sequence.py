"""docs/benchmarks.md's sequence-length table: torchtune 0.6.1 against ftune from 512 to 8k tokens a step
(benchmarks/vs_torchtune_seq.py)."""

from __future__ import annotations

from figures.common import load, provenance, table
from figures.training import no_figures, others_text


def _each(tt: dict | None, ft: dict | None, key: str, fmt: str) -> str:
    """ "torchtune / ftune" of one figure; a tool that failed at this length shows "-"."""
    return " / ".join("-" if x is None else f"{x[key]:{fmt}}" for x in (tt, ft))


def vs_torchtune_seq(result: dict | None = None) -> str:
    """One row per method and length: each tool's tokens/s, peak RSS, and ftune's share of the step's bound."""
    r = load("vs_torchtune_seq") if result is None else result
    where = provenance("vs_torchtune_seq") if result is None else ""
    if r["contended"] or r["quick"]:
        return no_figures(r, "vs_torchtune_seq.py", where)
    by = {(row["method"], row["seq_len"], row["tool"]): row for row in r["rows"]}
    rows = []
    for method, seq_len in sorted({(m, s) for m, s, _ in by}):
        tt, ft = by.get((method, seq_len, "torchtune")), by.get((method, seq_len, "ftune"))
        failed = [name for name, x in (("torchtune", tt), ("ftune", ft)) if x is None]
        shared = {(x["variant"], x["tool"]) for x in r.get("left_out", [])}
        why = {name: "left out: the machine was shared" if (f"{method}-fp32-s{seq_len}", name) in shared else "failed"
               for name in failed}  # fmt: skip
        rows.append([
            method, seq_len, *_each(tt, ft, "tok_s", ".0f").split(" / "),
            f"{ft['tok_s'] / tt['tok_s']:.2f}x" if not failed else f"{failed[0]} {why[failed[0]]}",
            *_each(tt, ft, "peak_rss_gib", ".2f").split(" / "), _each(tt, ft, "bound_fraction", ".2f"),
            _each(tt, ft, "bound_fraction_with_attention", ".2f"),
        ])  # fmt: skip
    header = ["method", "tokens a step", "torchtune tok/s", "ftune tok/s", "ftune's speed-up",
              "torchtune peak GiB", "ftune peak GiB", "share of the bound, products only (tt / ftune)",
              "share of the bound, with attention (tt / ftune)"]  # fmt: skip
    w = r["workload"]
    threads = f"OMP_NUM_THREADS={w['threads']}" if w["threads"] else "torch's default threads"
    run_line = (
        f"`{r['command']}`: one row of each length a step, {w['steps']} steps a run (the first not timed), "
        f"{w['repeats']} run{'s' if w['repeats'] != 1 else ''} of each tool alternating, fp32, eager, activation "
        f"checkpointing off in both, {threads}; the bound is the step's own matrix products timed alone, and with "
        "attention's causal FLOPs added at their rate. " + others_text(r)
    )
    return "\n\n".join(x for x in (table(header, rows, "lrrrrrrrr"), run_line, where) if x)
