"""Tokens/s and peak memory against sequence length: torchtune 0.6.1's single-device recipes against ftune's.

    python benchmarks/vs_torchtune_seq.py                        # 512 to 8192 tokens, full and LoRA, fp32
    python benchmarks/vs_torchtune_seq.py --quick                # plumbing: 256 and 512 tokens, 2 steps

benchmarks/vs_torchtune.py's workload (SmolLM2-135M-Instruct, the same pre-tokenised pydoc rows, the
same optimizer and LoRA settings, each tool's own recipe and config, activation checkpointing off in
both, eager, one process a run), with one row of `seq_len` tokens a step at each length, so that a
step's tokens grow with the length and attention's share with them. Runs alternate torchtune, ftune.

Each row also gives the step's share of its bound, twice: against the step's own matrix products
alone (ftune.runtime.matmul_speed, timed in this invocation) and against those plus attention's
FLOPs counted at the same products' rate (the causal half, forward and backward). Writes
benchmarks/results/vs_torchtune_seq.json; benchmarks/figures/report.py renders it into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_torchtune as vs  # noqa: E402
import vs_torchtune_measure as measure  # noqa: E402

LENGTHS = [512, 1024, 2048, 4096, 8192]


def attention_flops(hf_config: dict, seq_len: int) -> float:
    """The causal attention products of one step on one row of `seq_len` tokens (see flops_per_step)."""
    full = measure.flops_per_step(hf_config, "full", 1, seq_len)
    return full - 6 * measure.matmul_params(hf_config) * seq_len


def variants_for(methods: list[str], lengths: list[int], steps: int) -> list[dict]:
    return [
        {"name": f"{m}-fp32-s{s}", "method": m, "dtype": "fp32", "compile": False, "steps": steps,
         "batch": 1, "seq_len": s, "warmup": 1}
        for s in lengths for m in methods
    ]  # fmt: skip


def bound_row(hf_config: dict, variant: dict, bound_s: float) -> dict:
    """The step's bound without attention (its matrix products, timed) and with attention at their rate."""
    s = variant["seq_len"]
    products = measure.flops_per_step(hf_config, variant["method"], 1, s) - attention_flops(hf_config, s)
    rate = products / bound_s  # FLOP/s of the step's own products
    attention_s = attention_flops(hf_config, s) / rate
    return {"bound_s": round(bound_s, 3), "attention_at_rate_s": round(attention_s, 3),
            "products_gflops": round(rate / 1e9, 1)}  # fmt: skip


def summarise(runs: list[dict], variants: list[dict], bounds: dict[str, dict]) -> list[dict]:
    """One row per variant and tool: tokens/s of the steady steps (median over runs), peak RSS, bound shares.
    A run other processes shared (`others_cores` above measure.CONTENDED_CORES) counts in no row."""
    rows = []
    for v in variants:
        for tool in vs.TOOLS:
            ok = [r for r in runs if (r["variant"], r["tool"]) == (v["name"], tool) and r["step_seconds"]
                  and r["others_cores"] <= measure.CONTENDED_CORES]  # fmt: skip
            if not ok:
                continue
            step = measure.summary(
                [measure.summary(measure.steady(r["step_seconds"], v["warmup"]))["median"] for r in ok]
            )["median"]
            b = bounds[v["name"]]
            rows.append({
                "variant": v["name"], "method": v["method"], "seq_len": v["seq_len"], "tool": tool,
                "step_s": round(step, 2), "tok_s": round(v["seq_len"] / step, 1),
                "peak_rss_gib": round(measure.summary([r["peak_rss_gib"] for r in ok])["median"], 2),
                "step1_loss": ok[0]["step1_loss"],
                "bound_fraction": round(b["bound_s"] / step, 3),
                "bound_fraction_with_attention": round((b["bound_s"] + b["attention_at_rate_s"]) / step, 3),
            })  # fmt: skip
    return rows


def resummarise(path: Path) -> None:
    """Rebuild a results file's rows from its runs: a run other processes shared counts in no row (the
    table says so in its place, `left_out`), and the file holds figures while any row is left."""
    import json as json_

    r = json_.loads(path.read_text())
    w = r["workload"]
    variants = variants_for(w.get("methods") or sorted({x["variant"].split("-")[0] for x in r["runs"]}),
                            w["lengths"], w["steps"])  # fmt: skip
    shared = [x for x in r["runs"] if x["others_cores"] > measure.CONTENDED_CORES]
    r["rows"] = summarise(r["runs"], variants, r["bounds"])
    r["left_out"] = [
        {"variant": x["variant"], "tool": x["tool"], "others_cores": x["others_cores"]} for x in shared
    ]
    r["contended"] = r["quick"] or not r["rows"]
    r["note"] = r["note"].split("CONTENDED: ")[0] + " ".join(
        f"Left out: {x['tool']} {x['variant']} (other processes used {x['others_cores']:.2f} cores during it)."
        for x in shared
    )
    path.write_text(json_.dumps(r, indent=1) + "\n")
    print(f"rewrote {path}: {len(r['rows'])} rows, {len(shared)} runs left out")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="256 and 512 tokens, 2 steps, one repeat (plumbing)")
    p.add_argument("--lengths", nargs="+", type=int, help=f"tokens a step (default {LENGTHS})")
    p.add_argument("--methods", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    p.add_argument("--steps", type=int, help="steps a run, the first one not timed (default 3; --quick 2)")
    p.add_argument("--repeats", type=int, default=1, help="torchtune, ftune pairs per variant")
    p.add_argument("--ftune-home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "/tmp/bench_home")))
    p.add_argument("--out", type=Path, default=vs.BENCH / "results" / "vs_torchtune_seq.json")
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS of both tools' runs (default: torch's)")
    p.add_argument("--note", default="", help="added to the results file's note")
    p.add_argument(
        "--resummarise", action="store_true", help="rebuild --out's rows from its runs (see below)"
    )
    args = p.parse_args(argv)
    if args.resummarise:
        return resummarise(args.out)
    lengths = args.lengths or ([256, 512] if args.quick else LENGTHS)
    steps = args.steps or (2 if args.quick else 3)

    from results_file import write_results  # imports torch: after --help

    home = args.ftune_home
    model = vs.ensure_model(home)
    tt_python = vs.ensure_venv(home)
    site = vs.torchtune_recipes(tt_python)
    hf_config = json.loads((model / "config.json").read_text())
    variants = variants_for(args.methods, lengths, steps)
    tmp = Path(tempfile.mkdtemp(prefix="vs_seq_"))
    rows = vs.corpus_rows(model, steps, max(lengths))
    ctx = {"home": home, "model": model, "tmp": tmp, "torchtune_python": tt_python, "torchtune_recipes": site,
           "threads": args.threads}  # fmt: skip
    for s in lengths:  # every length reads the same text: the first s tokens of each long row
        (tmp / f"rows_{s}.json").write_text(json.dumps({"rows": [r[:s] for r in rows]}))
    bounds = {v["name"]: measure.model_bound_seconds(v["method"], "fp32", v["seq_len"], vs.configs.LORA)
              for v in variants}  # fmt: skip
    runs = []
    for repeat in range(args.repeats):
        for v in variants:
            for tool in vs.TOOLS:
                run = vs.one_run(tool, v, ctx | {"rows": tmp / f"rows_{v['seq_len']}.json"}, repeat)
                runs.append(run)
                print(f"{tool:9s} {v['name']:16s} steps {[round(x, 2) for x in run['step_seconds']]} "
                      f"peak {run['peak_rss_gib']:.2f} GiB, loss1 {run['step1_loss']}, "
                      f"others {run['others_cores']:.2f} cores"
                      + (f"\n  ERROR {run['error']}:\n    " + "\n    ".join(run["log_tail"]) if "error" in run else ""),
                      flush=True)  # fmt: skip
    after = {v["name"]: measure.model_bound_seconds(v["method"], "fp32", v["seq_len"], vs.configs.LORA)
             for v in variants}  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)
    bound_rows = {
        k: bound_row(hf_config, v, min(bounds[k], after[k])) for k, v in ((v["name"], v) for v in variants)
    }
    contended, note = measure.contention_note([r["others_cores"] for r in runs], args.quick, args.note)
    workload = {"model": vs.MODEL_NAME, "corpus": "pydoc_data.topics (CPython), pre-tokenised, contiguous rows",
                "corpus_sha256": hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16], "steps": steps,
                "repeats": args.repeats, "threads": args.threads, "batch": 1, "lengths": lengths, "methods": args.methods,
                "activation_checkpointing": False, "lora": vs.configs.LORA, "lr": vs.configs.LR,
                "torchtune": vs.TORCHTUNE_PINS}  # fmt: skip
    write_results(args.out, "vs_torchtune_seq", summarise(runs, variants, bound_rows), note=note,
                  contended=contended, quick=args.quick, workload=workload, bounds=bound_rows, runs=runs)  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
