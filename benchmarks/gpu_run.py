"""Every recipe family for 20 steps on a 1B-class model in bf16, on one GPU and on all of them, beside its memory plan.

    python benchmarks/gpu_run.py                      # on a CUDA machine: every family, 1 GPU and all GPUs
    python benchmarks/gpu_run.py --families lora grpo_lora --gpus 8
    python benchmarks/gpu_run.py --dry-run --gpus 4   # anywhere: the commands and the plans, no CUDA, no weights

For each family (full, LoRA, QAT, QAT + LoRA, DPO, full DPO, KD, GRPO with a LoRA and a full policy; the
reward-model recipes ship a 135M demo config only and are left out) the shipped 1B-class config runs 20 optimizer steps through `ftune run` in bf16 on CUDA: on one GPU (the
family's single-device recipe, or its distributed recipe at world size 1 when it has no other) and on
`--gpus` GPUs (the distributed recipe, FSDP2 over NCCL, launched by torchrun through `ftune run
--nproc_per_node`). Each run records, per rank: `ftune plan`'s predicted peak (ftune.planning, from the
config alone), the measured peak the allocator reached (`peak_allocated_gib`, `peak_reserved_gib`: the
recipe's log), tokens/s (median over the steps after the first; every position a step computes, padding
included, over all ranks) and model FLOP utilisation against this GPU's own bf16 matmul peak, measured
first (an 8192^3 product, the best of 10). Written to benchmarks/results/gpu_run.json.

MFU counts the model FLOPs of the positions a step computes (its `tokens`), as PaLM's appendix B does: a forward is 2 FLOPs a
parameter used in a matrix product (the output projection included, the embedding lookup not) plus
causal attention's 2 x layers x seq x dim a token; a full fine-tune trains at 3 forwards, a frozen base
(LoRA, QLoRA) at 2 (no weight gradients); recomputation (activation checkpointing), a reference, a
teacher and GRPO's sampling are not counted, so it is the useful share of the GPU, not its busy share.

Before a real run: the weights of each config's `checkpointer.checkpoint_dir` (`ftune download
<hf_repo_id>` for each one the dry run lists; Llama 3.2 and Gemma 3 need an accepted license and a
token) and the hub datasets the configs name. No figure of this script is in the docs until a GPU has
run it; the dry run (tests/benchmarks/test_gpu_run.py) checks that every command is a valid config whose
plan the run will compare with.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
RESULTS = REPO / "benchmarks" / "results" / "gpu_run.json"
STEPS = 20


@dataclass(frozen=True)
class Family:
    """A recipe family's runs: its single-device recipe (None: the distributed one at world size 1)."""

    name: str
    single: str | None
    distributed: str
    config: str
    overrides: tuple[str, ...] = ()


FAMILIES = (
    Family("full", "full_finetune_single_device", "full_finetune_distributed", "llama3_2/1B_full"),
    Family("lora", "lora_finetune_single_device", "lora_finetune_distributed", "llama3_2/1B_lora"),
    Family("qat", "qat_single_device", "qat_distributed", "gemma3/1B_qat_full"),
    Family("qat_lora", None, "qat_lora_finetune_distributed", "gemma3/1B_qat_lora"),
    Family("dpo", "lora_dpo_single_device", "lora_dpo_distributed", "llama3_2/1B_lora_dpo"),
    Family("full_dpo", None, "full_dpo_distributed", "llama3_2/1B_full_dpo"),
    Family(
        "kd",
        "knowledge_distillation_single_device",
        "knowledge_distillation_distributed",
        "llama3_2/3B_to_1B_kd",
    ),
    Family("grpo_lora", "lora_grpo_single_device", "lora_grpo_distributed", "llama3_2/1B_lora_grpo"),
    Family("grpo_full", "full_grpo_single_device", "full_grpo_distributed", "llama3_2/1B_full_grpo"),
)
# Every run: bf16 on CUDA, 20 steps, no saves or validation in between, one log line a step.
COMMON = (
    "device=cuda",
    "dtype=bf16",
    f"max_steps={STEPS}",
    "save_every_n_steps=null",
    "run_val_every_n_steps=null",
    "progress_bar=false",
    "log_every_n_steps=1",
)


@dataclass
class Run:
    """One run: what it launches, what the plan predicts, and (after it ran) what it measured."""

    family: str
    recipe: str
    config: str
    world_size: int
    command: list[str]
    plan_peak_gib: float
    plan_terms_gib: dict[str, float]
    flops_per_token: float
    measured: dict | None = None


def overrides_of(family: Family, output_dir: str) -> list[str]:
    return [*COMMON, *family.overrides, f"output_dir={output_dir}"]


def runs_of(family: Family, gpus: int) -> list[tuple[str, int]]:
    """(recipe, world size) of the family's one-GPU run and its all-GPU run (once when gpus is 1)."""
    out = [(family.single or family.distributed, 1)]
    if gpus > 1:
        out.append((family.distributed, gpus))
    return out


def command(recipe: str, world_size: int, config: str, overrides: list[str]) -> list[str]:
    launch = ["--nproc_per_node", str(world_size)] if world_size > 1 or "distributed" in recipe else []
    return ["ftune", "run", *launch, recipe, "--config", config, *overrides]


def model_flops_per_token(shape, seq: int) -> float:
    """Training FLOPs a position (see the module docstring): 3 forwards, or 2 with a frozen base; ``seq``
    is the plan's sequence length (the config's longest), so attention's share is an upper bound."""
    embedding = shape.vocab_size * shape.embed_dim
    matmul_params = shape.params - (0 if shape.tied_output else embedding)  # the lookup multiplies nothing
    forward = 2 * matmul_params + 2 * shape.num_layers * seq * shape.embed_dim  # causal attention: half of 4
    return float((3 if shape.trainable == shape.params else 2) * forward)


def plan_runs(families: list[Family], gpus: int, output_root: Path) -> list[Run]:
    """Every run's command, checked as `ftune validate` checks it (no data files read), and its plan."""
    from ftune import registry
    from ftune.cli.validate import validate
    from ftune.config.loading import load_config
    from ftune.planning import plan_config

    runs = []
    for family in families:
        for recipe, world in runs_of(family, gpus):
            out = str(output_root / f"{family.name}_{world}gpu")
            overrides = overrides_of(family, out)
            validate(family.config, overrides, recipe, files=False)
            cfg = load_config(family.config, overrides)
            p = plan_config(cfg, recipe, world_size=world, fsdp=registry.RECIPES[recipe].distributed)
            runs.append(
                Run(
                    family=family.name,
                    recipe=recipe,
                    config=family.config,
                    world_size=world,
                    command=command(recipe, world, family.config, overrides),
                    plan_peak_gib=round(p.peak_gib, 3),
                    plan_terms_gib=p.terms_gib(),
                    flops_per_token=model_flops_per_token(p.shape, p.workload.seq),
                )
            )
    return runs


def matmul_peak_flops(n: int = 8192, repeats: int = 10) -> float:
    """This GPU's bf16 matrix-product rate, FLOP/s: the best of `repeats` n^3 products."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


def measure(run: Run, peak_flops: float) -> dict:
    """Launch the run; its log's tokens/s, peak memory, MFU, losses."""
    out = Path(next(o.split("=", 1)[1] for o in run.command if o.startswith("output_dir=")))
    cmd = [sys.executable, "-m", "ftune.cli", *run.command[1:]]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    logs = sorted((out / "logs").glob("*.jsonl"))
    if proc.returncode != 0 or not logs:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        return {"error": f"exit {proc.returncode}: {tail}"}
    rows = [json.loads(line) for line in logs[-1].read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "tokens" in r]
    tps = statistics.median(r["tokens"] / r["step_seconds"] for r in steps[1:])
    trained = statistics.median(r["tokens_trained"] / r["step_seconds"] for r in steps[1:])
    last = steps[-1]
    return {
        "steps": len(steps),
        "tokens_per_s": round(tps, 1),
        "tokens_trained_per_s": round(trained, 1),
        "mfu": round(tps * run.flops_per_token / (run.world_size * peak_flops), 4),
        "peak_allocated_gib": last.get("peak_allocated_gib"),
        "peak_reserved_gib": last.get("peak_reserved_gib"),
        "plan_error": (
            round(last["peak_allocated_gib"] / run.plan_peak_gib - 1, 3)
            if "peak_allocated_gib" in last
            else None
        ),
        "losses": [round(r["loss"], 5) for r in steps],
    }


def main(argv: list[str] | None = None) -> list[Run]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", choices=[f.name for f in FAMILIES], help="default: all")
    parser.add_argument(
        "--gpus", type=int, help="GPUs of the all-GPU runs (default: every GPU this machine has)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands and plans; run nothing")
    parser.add_argument(
        "--results", type=Path, help=f"default: {RESULTS.relative_to(REPO)} (a real run only)"
    )
    parser.add_argument("--output-root", type=Path, default=Path(tempfile.gettempdir()) / "ftune_gpu_run")
    args = parser.parse_args(argv)
    families = [f for f in FAMILIES if not args.families or f.name in args.families]
    gpus = args.gpus
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(
                "gpu_run.py: no CUDA device here. Run it on a machine with NVIDIA GPUs, or pass --dry-run for "
                "the commands and the memory plans."
            )
        gpus = gpus or torch.cuda.device_count()
    gpus = gpus or 1
    runs = plan_runs(families, gpus, args.output_root)
    for run in runs:
        print(
            f"{run.family:10} {run.world_size} GPU  plan {run.plan_peak_gib:6.2f} GiB/rank  {' '.join(run.command)}"
        )
    if not args.dry_run:
        peak = matmul_peak_flops()
        print(f"bf16 matmul peak: {peak / 1e12:.1f} TFLOP/s a GPU", flush=True)
        for run in runs:
            run.measured = measure(run, peak)
            print(run.family, run.world_size, run.measured, flush=True)
    results = args.results or (None if args.dry_run else RESULTS)
    if results is not None:
        from results_file import write_results

        extra = {"dry_run": args.dry_run, "gpus": gpus}
        if not args.dry_run:
            import torch

            extra |= {"gpu": torch.cuda.get_device_name(0), "matmul_peak_tflops": round(peak / 1e12, 1)}
        write_results(
            results, "gpu_run", [asdict(r) for r in runs], note=os.environ.get("GPU_RUN_NOTE", ""), **extra
        )
    return runs


if __name__ == "__main__":
    main()
