"""What benchmarks/vs_torchtune.py measures and how: FLOPs a step, step times from log lines, one measured run.

The pure parts (flops_per_step, step_lines, summary, check_results) are unit-tested in
tests/benchmarks/test_vs_torchtune.py; `run_child` and `matmul_peak_gflops` measure this machine.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

# One log line a step: ftune's StdoutLogger "step 3 | loss 2.345 | ...", torchtune's "Step 3 | loss:2.3456 ...".
# Searched, not matched at the start: torchtune's progress bar (stderr, no newline) ends up before it on the line.
STEP_LINE = re.compile(r"(?<![\w|])[Ss]tep (\d+) \|.*?\bloss[: ]\s*([-+0-9.eE]+|nan|inf)")


def matmul_params(hf_config: dict[str, Any]) -> int:
    """Weights that take part in a matrix product per token: the layers' projections and the output projection.

    Norm weights are left out (no matrix product), and so is the input embedding (a lookup); with
    tied embeddings the same matrix is the output projection, which counts (once) either way.
    """
    c = hf_config
    d, layers, ff, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
    head_dim = c.get("head_dim") or d // c["num_attention_heads"]
    q = d * c["num_attention_heads"] * head_dim
    kv = 2 * d * c["num_key_value_heads"] * head_dim
    per_layer = 2 * q + kv + 3 * d * ff  # q and o, k and v, gate/up/down
    return layers * per_layer + vocab * d


def lora_params(hf_config: dict[str, Any], rank: int, targets: list[str]) -> int:
    """Adapter weights of LoRA rank `rank` on the named projections of every layer."""
    c = hf_config
    d = c["hidden_size"]
    head_dim = c.get("head_dim") or d // c["num_attention_heads"]
    out = {
        "q_proj": c["num_attention_heads"] * head_dim,
        "k_proj": c["num_key_value_heads"] * head_dim,
        "v_proj": c["num_key_value_heads"] * head_dim,
        "o_proj": d,
    }
    in_ = {"o_proj": c["num_attention_heads"] * head_dim}
    return c["num_hidden_layers"] * sum(rank * (in_.get(t, d) + out[t]) for t in targets)


def flops_per_step(
    hf_config: dict[str, Any], method: str, batch: int, seq_len: int, lora_rank: int = 8,
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj"),
) -> float:  # fmt: skip
    """Matrix-product FLOPs of one training step on `batch` rows of `seq_len` tokens (T = batch * seq_len).

    Weights: forward 2NT, backward 2NT for the input gradients, plus 2NT for the weight gradients
    when the weights train: 6NT for a full fine-tune, 4NT for LoRA (frozen base) plus 6 x the
    adapter's weights x T. Attention (no weights): per layer and token, the query-key and
    attention-value products over on average seq_len/2 causal positions, 2 x attn_dim x seq_len
    forward and twice that backward, so 6 x layers x attn_dim x seq_len x T (the causal half only:
    the useful products).
    """
    tokens = batch * seq_len
    n = matmul_params(hf_config)
    c = hf_config
    attn_dim = c["num_attention_heads"] * (c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])
    attention = 6 * c["num_hidden_layers"] * attn_dim * seq_len * tokens
    if method == "full":
        return 6 * n * tokens + attention
    if method == "lora":
        return 4 * n * tokens + 6 * lora_params(c, lora_rank, list(lora_targets)) * tokens + attention
    raise ValueError(f"method {method!r}: expected 'full' or 'lora'")


def step_lines(lines: list[tuple[float, str]]) -> list[tuple[int, float, float]]:
    """(step, arrival time, loss) of each step log line among (arrival time, line) pairs, in order."""
    out = []
    for t, line in lines:
        m = STEP_LINE.search(line)
        if m:
            out.append((int(m.group(1)), t, float(m.group(2))))
    steps = [s for s, _, _ in out]
    if steps != list(range(1, len(steps) + 1)):
        raise ValueError(f"expected one log line per step 1..N, got steps {steps}")
    return out


def step_seconds(steps: list[tuple[int, float, float]]) -> list[float]:
    """Duration of steps 2..N: the gap between consecutive step log lines (step 1 has no line before it)."""
    return [b[1] - a[1] for a, b in zip(steps, steps[1:])]


def summary(values: list[float]) -> dict[str, float]:
    """Median and range (the figures a table shows: median [min-max])."""
    if not values:
        raise ValueError("no values to summarise")
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def steady(seconds: list[float], warmup: int) -> list[float]:
    """Step durations after the first `warmup` steps (step 1, which has no duration, counts as one)."""
    return seconds[max(0, warmup - 1) :]


def busy_seconds() -> float:
    """CPU seconds all processes spent busy since boot (/proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


# Other processes' CPU use (cores) above which a run's times are not figures to quote.
CONTENDED_CORES = 0.2


def contention_note(others_cores: list[float], quick: bool, note: str) -> tuple[bool, str]:
    """Whether a set of runs was contended (or a --quick check), and the results file's note saying so.

    Args:
        others_cores: each run's `others_cores` (run_child's).
        quick: the run was a --quick plumbing check.
        note: what the caller adds (the --note option).

    Returns:
        (contended, note); the note is "idle machine" when nothing else is to be said.
    """
    others = max(others_cores)
    contended = others > CONTENDED_CORES or quick
    text = "--quick (plumbing check, not figures). " if quick else ""
    if others > CONTENDED_CORES:
        text += f"CONTENDED: other processes used up to {others:.2f} cores during the runs; not figures to quote. "
    return contended, (text + note).strip() or "idle machine"


def run_child(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Run one training process; time-stamp each stdout line as it arrives, measure its own peak RSS.

    Peak RSS is the child's own ru_maxrss from wait4 (that process only, model loading included);
    `others_cores` is the CPU time other processes took during the run over its wall time.
    """
    before, busy0, t0 = load1(), busy_seconds(), time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = [(time.perf_counter() - t0, line.rstrip("\n")) for line in proc.stdout]
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "lines": lines,
        "returncode": proc.returncode,
        "wall_s": wall,
        "peak_rss_gib": usage.ru_maxrss / 1024**2,  # KiB on Linux
        "cpu_s": cpu,
        "load1_before": before,
        "load1_after": load1(),
        "others_cores": max(0.0, (busy_seconds() - busy0 - cpu) / wall),
    }


def matmul_peak_gflops(size: int = 2048, repeats: int = 5, rounds: int = 3) -> float:
    """fp32 matrix-product throughput of this machine (GFLOP/s): the best round of `repeats` square products."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        best = min(best, (time.perf_counter() - start) / repeats)
    return 2 * size**3 / best / 1e9


def model_bound_seconds(method: str, dtype: str, tokens: int, lora: dict[str, Any]) -> float:
    """Seconds of the matrix products of one SmolLM2-135M step on `tokens` tokens: every linear layer's
    forward, input gradient and (full) weight gradient, the LoRA adapters' products, with the step's own
    shapes (ftune.runtime.matmul_speed). The step cannot be faster with these kernels: its bound."""
    import torch

    from ftune.models.smollm2 import smollm2_135m
    from ftune.runtime.device import get_dtype
    from ftune.runtime.matmul_speed import model_linears, step_products, time_products

    with torch.device("meta"):
        model = smollm2_135m()
    if method == "full":
        linears = model_linears(model, trains=True)
    else:
        linears = model_linears(
            model, trains=False, lora_rank=lora["rank"], lora_targets=tuple(lora["targets"])
        )
    return time_products(step_products(linears, tokens), get_dtype(dtype))


RUN_KEYS = {"variant", "tool", "repeat", "returncode", "step_seconds", "peak_rss_gib", "first_step_s",
            "step1_loss", "load1_before", "load1_after", "others_cores", "wall_s"}  # fmt: skip
SUMMARY_KEYS = {"variant", "tool", "tok_s", "tok_s_min", "tok_s_max", "peak_rss_gib", "first_step_s",
                "step1_loss", "flops_per_step", "matmul_fraction", "bound_fraction"}  # fmt: skip


def check_results(result: dict[str, Any]) -> None:
    """Raise ValueError naming what a vs_torchtune results file lacks (the schema benchmarks/figures/ relies on)."""
    problems = []
    for key in ("benchmark", "commit", "date", "command", "machine", "note", "rows", "runs",
                "matmul_peak_gflops", "matmul_bound", "contended", "quick", "workload"):  # fmt: skip
        if key not in result:
            problems.append(f"top-level key {key!r} missing")
    for i, row in enumerate(result.get("rows", [])):
        if missing := SUMMARY_KEYS - row.keys():
            problems.append(f"rows[{i}] lacks {sorted(missing)}")
    for i, run in enumerate(result.get("runs", [])):
        if missing := RUN_KEYS - run.keys():
            problems.append(f"runs[{i}] lacks {sorted(missing)}")
    if problems:
        raise ValueError("vs_torchtune results file: " + "; ".join(problems))
