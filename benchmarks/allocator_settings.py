"""What the peak's "rest" is: the training step under three CPU allocator settings, alternating.

    python benchmarks/allocator_settings.py [--rounds 2] [--steps 5] [--methods full lora]

step_profile.py splits the peak RSS of vs_torchtune's workload (SmolLM2-135M-Instruct, fp32,
eager, 4 rows of 512 tokens) into weights, gradients, optimizer state and saved activations; what
is left ("rest") is memory the allocator keeps after tensors are freed, plus transient buffers.
This runs the same step (step_profile.build: the shipped configs' optimizer and loss, clipping at
1.0) in a fresh process per setting, the settings alternating round by round (A B C A B C), so
that a slow hour hits all of them alike:

- ``default``: glibc's malloc as it comes (a freed block below its self-raising mmap threshold
  stays in the process's heap);
- ``THP_MEM_ALLOC_ENABLE=1``: PyTorch aligns large CPU allocations to 2 MiB and asks the kernel
  for huge pages;
- ``MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072``: every block of 128 KiB or more
  is its own mapping, returned to the kernel when freed, so the RSS follows the live tensors.

Each process times `--steps` steps (the first two are warm-up), reports the median step time and
its own peak RSS (VmHWM). Writes benchmarks/results/allocator_settings.json, which
benchmarks/figures/report.py renders into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_torchtune_measure as measure  # noqa: E402
from results_file import write_results  # noqa: E402

SETTINGS = {
    "default": {},
    "huge pages": {"THP_MEM_ALLOC_ENABLE": "1"},
    "mmap from 128 KiB": {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"},
}
WARMUP = 2


def child(method: str, steps: int, home: Path) -> dict:
    """Run `steps` training steps of `method` in this process; its step times and peak RSS."""
    import torch
    from step_profile import build, train_step
    from vs_torchtune import MODEL_NAME, corpus_rows

    from ftune.training.run.memory import peak_memory_gib

    model_dir = home / "models" / MODEL_NAME
    tokens = torch.tensor(corpus_rows(model_dir, 4, 512))
    batch = {"tokens": tokens, "labels": tokens.clone()}
    model, optimizer, loss_fn = build(method, model_dir)
    seconds = []
    for i in range(steps):
        start = time.perf_counter()
        train_step(model, optimizer, loss_fn, batch, i + 1)
        seconds.append(time.perf_counter() - start)
    return {"step_seconds": seconds, "peak_rss_gib": peak_memory_gib("cpu")["peak_rss_gib"]}


def run(method: str, setting: str, steps: int, home: Path) -> dict:
    cmd = [sys.executable, __file__, "--child", method, "--steps", str(steps), "--ftune-home", str(home)]
    env = {k: v for k, v in os.environ.items() if k not in {n for s in SETTINGS.values() for n in s}}
    result = measure.run_child(cmd, env | SETTINGS[setting], Path(__file__).resolve().parents[1])
    if result["returncode"] != 0:
        tail = "\n".join(line for _, line in result["lines"][-15:])
        raise SystemExit(f"{method} under {setting!r} failed:\n{tail}")
    out = json.loads(next(line[4:] for _, line in result["lines"] if line.startswith("ROW ")))
    timed = out["step_seconds"][WARMUP:]
    return {"method": method, "setting": setting, "env": SETTINGS[setting],
            "step_s": round(statistics.median(timed), 2), "step_seconds": [round(s, 2) for s in timed],
            "peak_rss_gib": round(out["peak_rss_gib"], 2), "others_cores": round(result["others_cores"], 2)}  # fmt: skip


def summarise(runs: list[dict]) -> list[dict]:
    """One row per (method, setting): medians over the rounds, and each round's figures."""
    rows = []
    for method in dict.fromkeys(r["method"] for r in runs):
        base = None
        for setting in SETTINGS:
            mine = [r for r in runs if r["method"] == method and r["setting"] == setting]
            if not mine:
                continue
            row = {"method": method, "setting": setting, "env": SETTINGS[setting],
                   "step_s": round(statistics.median(r["step_s"] for r in mine), 2),
                   "step_s_rounds": [r["step_s"] for r in mine],
                   "peak_rss_gib": round(statistics.median(r["peak_rss_gib"] for r in mine), 2),
                   "peak_rss_rounds": [r["peak_rss_gib"] for r in mine]}  # fmt: skip
            base = base or row
            row["time_vs_default"] = round(row["step_s"] / base["step_s"], 2)
            row["peak_vs_default"] = round(row["peak_rss_gib"] / base["peak_rss_gib"], 2)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2, help="A B C rounds (default 2)")
    p.add_argument("--steps", type=int, default=5, help=f"steps a process, the first {WARMUP} untimed")
    p.add_argument("--methods", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    p.add_argument("--ftune-home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "/tmp/bench_home")))
    p.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "results" / "allocator_settings.json"
    )
    p.add_argument("--child", choices=["full", "lora"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps <= WARMUP:
        p.error(f"--steps must be more than the {WARMUP} warm-up steps, got {args.steps}")
    if args.child:
        print("ROW " + json.dumps(child(args.child, args.steps, args.ftune_home)), flush=True)
        return
    runs = []
    for round_ in range(args.rounds):
        for method in args.methods:
            for setting in SETTINGS:
                runs.append(run(method, setting, args.steps, args.ftune_home) | {"round": round_})
                print(runs[-1], flush=True)
    contended, note = measure.contention_note([r["others_cores"] for r in runs], False, "")
    workload = {"model": "SmolLM2-135M-Instruct", "batch": 4, "seq_len": 512, "dtype": "fp32",
                "steps": args.steps, "warmup": WARMUP, "rounds": args.rounds, "threads": "torch default"}  # fmt: skip
    write_results(args.out, "allocator_settings", summarise(runs), note=note, contended=contended,
                  workload=workload, runs=runs)  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
