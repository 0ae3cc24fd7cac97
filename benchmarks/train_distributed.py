"""The distributed recipes at world size 2 (FSDP2, gloo) on one machine, next to train_throughput's workload.

    python benchmarks/train_distributed.py                      # full and LoRA, 6 steps each
    python benchmarks/train_distributed.py --results benchmarks/results/train_throughput_distributed.json

Each recipe runs through `ftune run --nproc_per_node 2` with train_throughput.py's workload split
over the ranks: SmolLM2-135M-Instruct, the demo dataset packed into rows of 512 tokens, batch 2 per
rank (so 4 x 512 = 2048 tokens a step, as on one device), fp32, eager, the shipped
smollm2/135M_full and 135M_lora configs otherwise. Figures come from rank 0's DiskLogger JSONL: the
step times recovered from its windowed tokens/s (train_throughput.step_seconds), the median after
the first step, and rank 0's peak RSS. Both ranks share the machine's 2 cores, so this shows what
sharding costs and saves, not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_throughput as tt  # noqa: E402
import vs_torchtune_measure as measure  # noqa: E402

RECIPES = {"full": "full_finetune_distributed", "lora": "lora_finetune_distributed"}
WORLD_SIZE, BATCH_PER_RANK = 2, tt.BATCH_SIZE // 2


def run(method: str, steps: int, home: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"bench_dist_{method}_"))
    cmd = [
        sys.executable, "-P", "-m", "ftune.cli", "run", "--nproc_per_node", str(WORLD_SIZE), RECIPES[method],
        "--config", tt.CONFIG[method], f"output_dir={out}", "dataset.packed=true",
        f"tokenizer.max_seq_len={tt.SEQ_LEN}", f"batch_size={BATCH_PER_RANK}", f"max_steps={steps}",
        "save_every_n_steps=null", "run_val_every_n_steps=null", "progress_bar=false", "log_every_n_steps=1",
        "lr_scheduler.num_warmup_steps=0",
    ]  # fmt: skip
    result = tt.Result("ftune", method, "fp32", False, steps=steps, warmup=1)
    env = tt.child_env(None) | {"FTUNE_HOME": str(home)}
    try:
        tt.run_measured(cmd, env, result)
        logs = sorted((out / "logs").glob("*.jsonl"))
        if result.error or not logs:
            raise SystemExit(
                f"{RECIPES[method]} failed:\n{result.error or 'no DiskLogger JSONL in ' + str(out)}"
            )
        records = [json.loads(line) for line in logs[-1].read_text().splitlines() if line.strip()]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    seconds = tt.step_seconds(records)[result.warmup :]
    row = {
        "recipe": RECIPES[method], "world_size": WORLD_SIZE, "batch_per_rank": BATCH_PER_RANK,
        "tok_s": round(tt.SEQ_LEN * tt.BATCH_SIZE / statistics.median(seconds)),
        "peak_gib_rank0": round(max(r["peak_memory_gib"] for r in records), 2), "single_method": method,
        "step_seconds": [round(s, 2) for s in seconds], "others_cores": round(result.others_cores, 2),
        "load1_before": result.load1_before, "load1_after": result.load1_after,
    }  # fmt: skip
    print(row, flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=["full", "lora"], choices=list(RECIPES))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument(
        "--ftune-home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "/tmp/bench_home"))
    )
    parser.add_argument("--results", type=Path, default=None, help="write the results file the docs read")
    args = parser.parse_args(argv)
    tt.ensure_model(args.ftune_home)
    rows = [run(method, args.steps, args.ftune_home) for method in args.methods]
    if args.results:
        from results_file import write_results

        _, note = measure.contention_note([r["others_cores"] for r in rows], False, "")
        workload = (f"as train_throughput at world size {WORLD_SIZE}: batch {BATCH_PER_RANK} per rank, fp32, no "
                    f"compile, {args.steps} steps, median after the first; rank 0's log")  # fmt: skip
        write_results(args.results, "world size 2 (FSDP2, gloo)", rows, note=note, workload=workload)


if __name__ == "__main__":
    main()
