"""docs/benchmarks.md's figures of where one training step's time and memory go (step_profile.json,
allocator_settings.json)."""

from __future__ import annotations

from figures.common import load, provenance, table
from figures.training import no_figures

SPLIT_PARTS = (
    ("projections", ("forward projections", "backward projections")),
    ("attention core", ("forward attention core", "backward attention core")),
    ("MLP rest", ("forward mlp rest", "backward mlp rest")),
    ("norms", ("forward norms", "backward norms")),
    ("residual glue", ("forward glue", "backward glue")),
    ("head + loss", ("head + loss", "backward rest")),
    ("optimizer", ("optimizer",)),
)


def step_split() -> str:
    """The unprofiled step split by module with hooks (step_profile.json's split_s, step_split.py)."""
    r = load("step_profile")
    rows = []
    for row in r["rows"]:
        split = row["split_s"]
        cells = []
        for _, keys in SPLIT_PARTS:
            seconds = sum(split[k] for k in keys)
            cells.append(f"{seconds:.2f} ({seconds / split['step']:.0%})")
        rows.append([row["method"], f"{split['step']:.2f}", f"{row['bound_s']:.2f}", *cells])
    header = ["method", "step s", "matmul bound s", *(f"{name} s" for name, _ in SPLIT_PARTS)]
    how = (
        "One unprofiled step after the timed ones, each decoder sub-module's forward and backward timed "
        "with module hooks and summed over the layers (`benchmarks/step_split.py`); the projections are "
        "the linear layers whose hooks fire (a trained SwiGLU down projection runs inside the MLP's own "
        'autograd function and counts in "MLP rest"), "head + loss" is the forward and backward '
        "outside the layers. The matmul bound is the same step's matrix products timed alone. "
        + "; ".join(
            f"{row['method']}: timed step {row['step_s']:.2f} s, hooked {row['split_s']['step']:.2f} s, "
            f"profiled {row['profiled_step_s']:.2f} s"
            for row in r["rows"]
        )
        + "."
    )
    return "\n\n".join((table(header, rows, "lrr" + "r" * len(SPLIT_PARTS)), how, provenance("step_profile")))


def step_profile() -> str:
    """Where a step's time goes (benchmarks/step_profile.py): shares of the profiled step, the matmul rate."""
    r = load("step_profile")
    peak = max(r["matmul_peak_gflops"])
    rows = []
    for row in r["rows"]:
        s = row["shares"]
        others = ", ".join(
            f"{name.removeprefix('aten::')} {share:.0%}" for name, share in row["top_other"][:4]
        )
        rows.append([
            row["method"], f"{row['step_s']:.1f}", f"{row['tok_s']:.0f}", f"{row['matmul_fraction']:.0%}",
            f"{s['matmul']:.0%}", f"{row['matmul_gflop_s']:.0f} ({row['matmul_rate_of_peak']:.0%})",
            f"{s['attention']:.0%}", f"{s['loss']:.0%}", f"{s['optimizer']:.0%}", f"{s['other']:.0%} ({others})",
        ])  # fmt: skip
    header = ["method", "step s", "tok/s", "of matmul peak", "matmul share", "matmul GFLOP/s (of peak)",
              "attention", "loss softmax", "optimizer + clipping", "other (largest)"]  # fmt: skip
    run_line = (
        f"`{r['command']}`: median of {len(r['rows'][0]['step_s_all'])} steps after 2 warm-up steps, then "
        f"one step under `torch.profiler` for the shares; fp32 matrix-product peak {peak:.0f} GFLOP/s "
        f"(measured before and after); {r['note']}."
    )
    return "\n\n".join((table(header, rows, "lrrrrrrrrl"), run_line, provenance("step_profile")))


def step_memory() -> str:
    """What holds the peak RSS of each variant (benchmarks/step_profile.py)."""
    r = load("step_profile")
    parts = ["runtime", "weights", "gradients", "optimizer_state", "activations", "rest"]
    rows = [[row["method"], f"{row['memory_gib']['peak_rss']:.2f}", *(f"{row['memory_gib'][k]:.2f}" for k in parts)]
            for row in r["rows"]]  # fmt: skip
    header = ["method", "peak RSS GiB", "Python + torch + data", "weights", "gradients", "optimizer state",
              "saved activations", "rest (allocator, transients)"]  # fmt: skip
    return "\n\n".join((table(header, rows, "lrrrrrrr"), provenance("step_profile")))


def step_memory_allocator() -> str:
    """The step under three allocator settings, alternating in fresh processes (allocator_settings.json)."""
    r = load("allocator_settings")
    if r["contended"]:
        return no_figures(r | {"quick": False}, "allocator_settings.py", "")
    rows = [[row["method"], f"{row['setting']}" + (f" (`{' '.join(f'{k}={v}' for k, v in row['env'].items())}`)" if row["env"] else ""),
             f"{row['peak_rss_gib']:.2f} {row['peak_rss_rounds']}", f"{row['peak_vs_default']:.2f}x",
             f"{row['step_s']:.1f} {row['step_s_rounds']}", f"{row['time_vs_default']:.2f}x"]
            for row in r["rows"]]  # fmt: skip
    header = ["method", "allocator setting", "peak RSS GiB [rounds]", "peak vs default", "step s [rounds]",
              "step time vs default"]  # fmt: skip
    w = r["workload"]
    how = (f"{w['rounds']} rounds, the settings alternating, each run a fresh process of {w['steps']} steps "
           f"(the first {w['warmup']} untimed); medians over the rounds.")  # fmt: skip
    said = []
    for method in dict.fromkeys(row["method"] for row in r["rows"]):
        by = {row["setting"]: row for row in r["rows"] if row["method"] == method}
        parts = [f"{name}: {by[name]['peak_vs_default']:.2f}x the peak RSS at {by[name]['time_vs_default']:.2f}x the "
                 "step time" for name in by if name != "default"]  # fmt: skip
        said.append(f"{method}, against the default: " + "; ".join(parts) + ".")
    return "\n\n".join((table(header, rows, "llrrlr"), how, " ".join(said), provenance("allocator_settings")))


def attention_core() -> str:
    """The attention core alone, every option against the step's matmul rate (benchmarks/attention.py)."""
    r = load("attention")
    worst = max(x for x in [*r["others_cores"], 0.0] if x is not None)
    if r["quick"] or r["contended"]:
        kind = "a `--quick` run (plumbing, not figures)" if r["quick"] else "a run on a busy machine"
        return (
            f"No figures yet: the results file holds {kind}, measured at load {r['load1_before']} while other "
            f"processes used up to {worst:.2f} cores, so this page quotes nothing from it. Rerun "
            "`python benchmarks/attention.py` on an idle machine, then `python benchmarks/figures/report.py`. "
            + provenance("attention")
        )
    rows = []
    for row in r["rows"]:
        if "error" in row:
            rows.append(
                [row["shape"], row["mask"], row["option"], "-", "-", "-", "-", "-", "-", row["error"]]
            )
            continue
        both = row.get("fwd_bwd_ms")
        diff = max(row["max_abs_diff"].values())
        rows.append([
            row["shape"], row["mask"], row["option"], f"{row['fwd_ms']:.1f}",
            f"{both:.1f}" if both else "no backward on CPU", f"{row['gflop_s']:.0f}" if both else "-",
            f"{row['bound_ms'] / both:.0%}" if both else "-",
            f"{row['speedup_vs_today']:.2f}x" if both else "-", f"{diff:.1e}",
            ("yes" if row["exact"] else "no") + (f" (compile {row['compile_s']:.0f} s)" if "compile_s" in row else ""),
        ])  # fmt: skip
    header = ["shape", "mask", "option", "fwd ms", "fwd+bwd ms", "GFLOP/s", "of bound", "vs today",
              "max abs diff", "exact"]  # fmt: skip
    bounds = "; ".join(
        f"{row['shape']} {row['mask']} {row['bound_ms']:.1f} ms"
        for row in r["rows"]
        if row["option"] == "sdpa (default dispatch)" and "bound_ms" in row
    )
    shipped = "; ".join(f"{kind}: " + ", ".join(f"{kernel} up to {n}" if n else kernel for n, kernel in entries)
                        for kind, entries in r["fastest"].items())  # fmt: skip
    how = (
        f"`{r['command']}`, {r['threads']} threads; the step's own matrix products ran at "
        f"{r['matmul_gflop_s']:.0f} GFLOP/s, so the bound (attention's FLOPs at that rate) is {bounds}. "
        f'"Of bound": the bound over the option\'s forward + backward time; "vs today": today\'s path '
        f"(64-row blocks, 256 for a one-row mask) over the option's time. The fastest exact option ftune can "
        f"ship, per mask and length: {shipped}."
    )
    verdicts = []
    for mask in ("causal", "documents"):
        group = [
            row for row in r["rows"] if (row["shape"], row["mask"]) == ("4x512", mask) and row.get("exact")
        ]
        if not group:
            continue
        best = max(group, key=lambda row: row["speedup_vs_today"])
        today_ms = best["fwd_bwd_ms"] * best["speedup_vs_today"]
        verdicts.append(
            f"4x512 {mask}: the fastest exact option ({best['option']}) is {best['speedup_vs_today']:.2f}x today's "
            f"path; today's takes {today_ms / best['bound_ms']:.2f}x the bound, so 2x faster would need "
            f"{today_ms / 2 / best['bound_ms']:.2f}x it"
        )
    verdict = (
        ("At sequence 512 (issue 43's target, 2x today's forward + backward): " + "; ".join(verdicts) + ".")
        if verdicts
        else ""
    )
    return "\n\n".join(
        x for x in (table(header, rows, "llrrrrrrrl"), how, verdict, provenance("attention")) if x
    )
