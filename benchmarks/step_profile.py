"""Where a training step's time goes, on vs_torchtune.py's workload: the profile behind its matmul fraction.

    python benchmarks/step_profile.py [--steps 3] [--methods full lora]

Builds what ftune's full and LoRA single-device recipes build for benchmarks/vs_torchtune.py
(SmolLM2-135M-Instruct from $FTUNE_HOME, fp32, eager, 4 rows of 512 tokens of CPython's
pydoc_data.topics, the optimizer and loss of the shipped smollm2/135M_full and 135M_lora configs
with vs_torchtune's lr, weight decay and LoRA rank 8 on q_proj/v_proj, clipping at 1.0) and runs
the training step: forward, backward, clipping, optimizer step. After two warm-up steps it times
`--steps` steps (median wall time), then profiles one more with torch.profiler and splits that
step's operator time into matrix products (their FLOPs counted by the profiler), attention
kernels, the loss's softmax work, the optimizer and clipping, and everything else, listing the
largest "everything else" operators. The fraction of the matmul peak is vs_torchtune's:
`flops_per_step` / step time / this machine's fp32 matrix-product peak, measured in the same run.
The profiler inflates that step, short kernels most, so the shares are of profiled time; one
unprofiled step before it is split by module with hooks as well (step_split.py: projections,
attention core, MLP rest, norms, residual glue, head + loss, optimizer, in wall seconds).
Writes benchmarks/results/step_profile.json; benchmarks/figures/report.py renders docs/benchmarks.md's table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_torchtune_configs as configs  # noqa: E402
import vs_torchtune_measure as measure  # noqa: E402
from results_file import load1, write_results  # noqa: E402
from step_ablation import saved_activation_mib  # noqa: E402
from step_split import step_split  # noqa: E402
from vs_torchtune import MODEL_NAME, corpus_rows  # noqa: E402

from ftune import training  # noqa: E402
from ftune.checkpointing import load_hf  # noqa: E402
from ftune.config import instantiate  # noqa: E402
from ftune.peft import apply_lora  # noqa: E402
from ftune.runtime.device import get_dtype  # noqa: E402
from ftune.training.run.memory import peak_memory_gib  # noqa: E402
from ftune.training.step.token_loss import batch_loss  # noqa: E402

MATMUL = {"aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm"}
LOSS = ("softmax", "nll_loss", "_LinearCrossEntropy", "logsumexp")
REGIONS = ("forward", "backward", "optimizer")


def category(name: str, region: str) -> str:
    """The bucket of one profiled operator (by name, and by the step's region for the optimizer)."""
    if name in MATMUL:
        return "matmul"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    if any(k in name for k in LOSS):
        return "loss"
    if region == "optimizer":
        return "optimizer"
    return "other"


def build(
    method: str, model_dir: Path, dtype: str
) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.nn.Module]:
    shipped = yaml.safe_load(
        (configs.REPO / "recipes" / "configs" / "smollm2" / f"135M_{method}.yaml").read_text()
    )
    model = load_hf(model_dir, dtype=get_dtype(dtype)).train()
    if method == "lora":
        lora = configs.LORA
        apply_lora(model, targets=lora["targets"], rank=lora["rank"], alpha=lora["alpha"])
    params = [p for p in model.parameters() if p.requires_grad]
    node = shipped["optimizer"] | {"lr": configs.LR[method], "weight_decay": configs.WEIGHT_DECAY}
    return model, instantiate(node, params, _path="optimizer"), instantiate(shipped["loss"], _path="loss")


def _rss_gib() -> float:
    """The process's current resident set size (VmRSS), GiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2**20
    raise ValueError("/proc/self/status has no VmRSS")


def _gib(tensors) -> float:
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values()) / 2**30


def memory_parts(model, optimizer, loss_fn, batch, runtime_gib: float, peak_gib: float) -> dict[str, float]:
    """What the peak RSS is made of: each part as if all were held at once, and the rest (allocator, copies)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    parts = {
        "peak_rss": peak_gib,
        "runtime": runtime_gib,
        "weights": _gib(model.parameters()),
        "gradients": _gib(trainable),
        "optimizer_state": _gib(state),
        "activations": saved_activation_mib(model, loss_fn, batch) / 1024,
    }
    parts["rest"] = parts["peak_rss"] - sum(v for k, v in parts.items() if k != "peak_rss")
    return {k: round(v, 2) for k, v in parts.items()}


def train_step(model, optimizer, loss_fn, batch: dict, step: int) -> dict[str, float]:
    """One training step of this workload: forward, backward, clipping at 1.0, optimizer step (regions
    named for the profiler); returns each region's wall seconds."""
    cpu = torch.device("cpu")
    micro = [training.on_device(batch, cpu)]
    step_loss = training.StepLoss(micro, optimizer, step=step, device=cpu, per=training.per_token)
    walls = [time.perf_counter()]
    with torch.profiler.record_function("## forward"):
        loss = training.Loss(*batch_loss(model, loss_fn, micro[0], device=cpu), {})
    walls.append(time.perf_counter())
    with torch.profiler.record_function("## backward"):
        step_loss.scaled(loss).backward()
    walls.append(time.perf_counter())
    with torch.profiler.record_function("## optimizer"):
        step_loss.finish(torch.nn.utils.clip_grad_norm_(training.trainable_params(model), 1.0))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    walls.append(time.perf_counter())
    return {region: b - a for region, a, b in zip(REGIONS, walls, walls[1:])}


def profile_method(method: str, batch: dict, model_dir: Path, steps: int, dtype: str) -> dict:
    runtime_gib = _rss_gib()  # python, torch and the batch, before the model
    model, optimizer, loss_fn = build(method, model_dir, dtype)

    def step(i: int) -> float:
        start = time.perf_counter()
        train_step(model, optimizer, loss_fn, batch, i)
        return time.perf_counter() - start

    for i in range(2):
        step(i)
    times = [step(i + 2) for i in range(steps)]
    split = step_split(model, lambda: train_step(model, optimizer, loss_fn, batch, steps + 2))
    peak_gib = peak_memory_gib("cpu")[
        "peak_rss_gib"
    ]  # before the profiler, which holds every event in memory
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True) as prof:
        step(steps + 3)
    memory = memory_parts(model, optimizer, loss_fn, batch, runtime_gib, peak_gib)
    events = list(prof.events())
    spans = {e.name[3:]: e.time_range for e in events if e.name.startswith("## ")}
    buckets: Counter[str] = Counter()
    others: Counter[str] = Counter()
    matmul_flops = 0
    for e in events:
        if e.name.startswith("## ") or e.device_type != torch.autograd.DeviceType.CPU:
            continue
        region = next((r for r in REGIONS if spans[r].start <= e.time_range.start < spans[r].end), "other")
        bucket = category(e.name, region)
        buckets[bucket] += e.self_cpu_time_total
        if bucket == "matmul":
            matmul_flops += e.flops or 0
        elif bucket == "other":
            others[e.name] += e.self_cpu_time_total
    total = sum(buckets.values())
    matmul_s = buckets["matmul"] / 1e6
    return {
        "method": method,
        "step_s": round(statistics.median(times), 2),
        "step_s_all": [round(t, 2) for t in times],
        "profiled_step_s": round(total / 1e6, 2),
        "shares": {
            k: round(buckets[k] / total, 3) for k in ("matmul", "attention", "loss", "optimizer", "other")
        },
        "matmul_gflop_s": round(matmul_flops / matmul_s / 1e9, 1),
        "top_other": [[name, round(us / total, 3)] for name, us in others.most_common(6)],
        "region_s": {r: round((spans[r].end - spans[r].start) / 1e6, 2) for r in REGIONS},
        "memory_gib": memory,
        "split_s": split,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--steps", type=int, default=3, help="timed steps a method, after 2 warm-up steps (default 3)"
    )
    p.add_argument("--methods", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    p.add_argument(
        "--dtype", default="fp32", choices=["bf16", "fp32"], help="the model's dtype (default fp32)"
    )
    p.add_argument("--ftune-home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "/tmp/bench_home")))
    p.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "results" / "step_profile.json"
    )
    p.add_argument(
        "--env", nargs="+", default=[], metavar="KEY=VALUE", help="environment of the measured processes"
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    bad = [kv for kv in args.env if "=" not in kv]
    if bad:
        p.error(f"--env takes KEY=VALUE pairs; got {bad}")
    extra_env = dict(kv.split("=", 1) for kv in args.env)
    model_dir = args.ftune_home / "models" / MODEL_NAME
    hf_config = yaml.safe_load((model_dir / "config.json").read_text())
    batch_size, seq_len = 4, 512
    load_before = load1()
    peak = [] if args.child else [measure.matmul_peak_gflops()]
    rows = []
    for method in args.methods:
        if args.child:  # this process measures one method (its own peak RSS)
            tokens = torch.tensor(corpus_rows(model_dir, batch_size, seq_len))
            batch = {"tokens": tokens, "labels": tokens.clone()}
            row = profile_method(method, batch, model_dir, args.steps, args.dtype)
            print("ROW " + json.dumps(row), flush=True)
            return
        child = [sys.executable, __file__, "--child", "--methods", method, "--steps", str(args.steps),
                 "--ftune-home", str(args.ftune_home), "--dtype", args.dtype]  # fmt: skip
        bound_s = measure.model_bound_seconds(method, args.dtype, batch_size * seq_len, configs.LORA)
        out = subprocess.run(
            child, capture_output=True, text=True, check=True, env=os.environ | extra_env
        ).stdout
        row = json.loads(next(line[4:] for line in out.splitlines() if line.startswith("ROW ")))
        flops = measure.flops_per_step(hf_config, method, batch_size, seq_len)
        row |= {"tok_s": round(batch_size * seq_len / row["step_s"], 1), "flops_per_step": flops,
                "bound_s": round(bound_s, 2), "bound_fraction": round(bound_s / row["step_s"], 3)}  # fmt: skip
        rows.append(row)
        print(row, flush=True)
    peak.append(measure.matmul_peak_gflops())
    for row in rows:
        row["matmul_fraction"] = round(row["flops_per_step"] / row["step_s"] / 1e9 / max(peak), 3)
        row["matmul_rate_of_peak"] = round(row["matmul_gflop_s"] / max(peak), 3)
    write_results(
        args.out, "step_profile", rows,
        note=f"load average {load_before} before, {load1()} after (this process uses 2 threads)",
        matmul_peak_gflops=[round(x, 1) for x in peak],
        env=extra_env,
        workload={"model": MODEL_NAME, "batch": batch_size, "seq_len": seq_len, "dtype": args.dtype,
                  "lora": configs.LORA, "lr": configs.LR, "corpus": "pydoc_data.topics, as vs_torchtune.py"},
    )  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
