"""The GRPO demo, measured: from the quickstart's SFT model, GRPO with an exact-match reward on the
training prompts, and held-out exact match before and after.

    ./quickstart.sh                                  # first: the model and the demo data
    python benchmarks/grpo_demo.py [--sft-merged DIR] [--minutes 20] [--lr 1e-4] [--group-size 8]

1. **SFT** (unless ``--sft-merged`` names one): the quickstart's run, ``lora_finetune_single_device
   --config smollm2/135M_lora max_steps=60``, saving the adapter merged into the base
   (``checkpointer.save_adapter_weights_only=false``: ``step_60/merged``), the model GRPO starts from
   and its reference (the KL is measured to the SFT model, as TRL users do with a merged SFT model).
2. **GRPO**: ``lora_grpo_single_device --config smollm2/135M_lora_grpo`` on that model, new LoRA
   adapters, the exact-match reward on ``train_prompts.jsonl``, for ``--steps`` steps or until
   ``--minutes`` of training have passed (the recipe stops at a step boundary on SIGTERM and saves).
3. **Exact match** (``ftune run eval``, greedy, the 100 held-out prompts) of the SFT model and of the
   GRPO adapter over it.

Writes benchmarks/results/grpo_demo.json (one row per setting; rows of other settings are kept), from
which benchmarks/figures/report.py renders the figures of docs/recipes/lora_grpo_single_device.md, and the run's
curves (`ftune plot`) to docs/recipes/grpo_demo_plot.png.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from demo_runs import demo_parser, log_rows
from results_file import ROOT, load1, write_results

MODEL, REPO = "SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"
CONFIG = "smollm2/135M_lora_grpo"


def run(cmd: list[str], env: dict[str, str], log: Path, minutes: float | None = None) -> float:
    """Run one ftune command (its output in `log`); SIGTERM it after `minutes`; its wall time in seconds."""
    start = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=None if minutes is None else minutes * 60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the recipe saves the step it is at, then exits
            code = proc.wait()
    stopped = minutes is not None and time.perf_counter() - start >= minutes * 60
    if code and not stopped:
        sys.exit(f"grpo_demo: `{' '.join(cmd)}` failed (exit {code}); its output: {log}")
    return round(time.perf_counter() - start, 1)


def main() -> None:
    parser = demo_parser(__doc__, "grpo_demo")
    parser.add_argument("--minutes", type=float, default=20.0, help="GRPO training time budget")
    parser.add_argument("--steps", type=int, default=1000, help="GRPO steps at most")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4, help="prompts per step")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for the GRPO run")
    args = parser.parse_args()
    home = args.home.expanduser().resolve()
    model, data = home / "models" / MODEL, home / "data" / "demo"
    if not (model / "model.safetensors").exists() or not (data / "heldout.jsonl").exists():
        sys.exit(f"grpo_demo: no converted model or demo data under {home}; run ./quickstart.sh first.")
    env = {**os.environ, "FTUNE_HOME": str(home)}
    ftune = [sys.executable, "-m", "ftune.cli"]
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    sft = args.sft_merged
    if sft is None:
        sft_dir = out / "sft"
        shutil.rmtree(sft_dir, ignore_errors=True)
        run([*ftune, "run", "lora_finetune_single_device", "--config", "smollm2/135M_lora", f"output_dir={sft_dir}",
             "max_steps=60", f"dataset.data_dir={data}", f"dataset_val.data_dir={data}", "save_every_n_steps=null",
             "checkpointer.save_adapter_weights_only=false", "progress_bar=false"], env, out / "sft.log")  # fmt: skip
        sft = sft_dir / "step_60" / "merged"
    sft = sft.resolve()
    model_args = [
        f"tokenizer.path={model}",
        f"checkpointer.checkpoint_dir={sft}",
        f"checkpointer.hf_repo_id={REPO}",
    ]

    def exact_match(name: str, extra: list[str]) -> dict:
        result = out / f"eval_{name}.json"
        cmd = [
            *ftune,
            "run",
            "eval",
            "--config",
            "eval",
            *model_args,
            f"heldout_file={data / 'heldout.jsonl'}",
        ]
        seconds = run([*cmd, "limit=100", f"output_file={result}", *extra], env, out / f"eval_{name}.log")
        em = json.loads(result.read_text())["exact_match"]
        return {"accuracy": em["accuracy"], "num_correct": em["num_correct"], "num_total": em["num_total"],
                "seconds": seconds}  # fmt: skip

    before = exact_match("sft", [])
    grpo_dir = out / "grpo"
    shutil.rmtree(grpo_dir, ignore_errors=True)
    settings = [f"optimizer.lr={args.lr}", f"group_size={args.group_size}", f"batch_size={args.batch_size}",
                f"temperature={args.temperature}", f"loss.beta={args.beta}", *args.extra]  # fmt: skip
    cmd = [*ftune, "run", "lora_grpo_single_device", "--config", CONFIG, f"output_dir={grpo_dir}", *model_args,
           f"dataset.data_dir={data}", f"dataset_val.data_dir={data}", f"max_steps={args.steps}",
           "save_every_n_steps=null", "run_val_every_n_steps=null", "progress_bar=false", *settings]  # fmt: skip
    load = [load1()]
    seconds = run(cmd, env, out / "grpo.log", minutes=args.minutes)
    load.append(load1())
    rows = [r for r in log_rows(grpo_dir) if "loss" in r]
    steps = rows[-1]["step"]
    after = exact_match("grpo", [f"adapter_dir={grpo_dir / f'step_{steps}'}"])
    plot = ROOT / "docs" / "recipes" / "grpo_demo_plot.png"  # the curves shown on the recipe page
    subprocess.run([*ftune, "plot", str(grpo_dir), "-o", str(plot)], env=env, cwd=ROOT, check=False)

    def public(text: str) -> str:  # no path of this machine in a results file the docs show
        return (
            text.replace(str(sft), "<SFT model>")
            .replace(str(out), "output/grpo_demo")
            .replace(str(home), "$FTUNE_HOME")
        )

    row = {
        "command": public("python benchmarks/grpo_demo.py " + " ".join(sys.argv[1:])),
        "sft_model": "the quickstart's SFT run (60 LoRA steps of smollm2/135M_lora), merged"
        if args.sft_merged is None
        else "--sft-merged: a merged SFT model folder",
        "grpo_command": public(" ".join(["ftune", *cmd[3:]])),
        "settings": {
            "lr": args.lr,
            "group_size": args.group_size,
            "batch_size": args.batch_size,
            "temperature": args.temperature,
            "beta": args.beta,
            "extra": args.extra,
        },  # fmt: skip
        "steps": steps,
        "threads": os.environ.get("OMP_NUM_THREADS", "torch's default (the cores)"),
        "train_seconds": seconds,
        "minutes_budget": args.minutes,
        "load_average_1min": load,
        "exact_match_sft": before,
        "exact_match_grpo": after,
        "curve": [
            {
                k: r.get(k)
                for k in (
                    "step",
                    "reward",
                    "frac_reward_zero_std",
                    "kl",
                    "completions/mean_length",
                    "time/rollout_s",
                    "step_seconds",
                )
            }
            for r in rows
        ],  # fmt: skip
    }
    path = ROOT / "benchmarks" / "results" / "grpo_demo.json"
    kept = json.loads(path.read_text())["rows"] if path.exists() else []
    all_rows = [r for r in kept if r["settings"] != row["settings"]] + [row]
    write_results(path, "grpo_demo", all_rows)
    print(json.dumps({k: v for k, v in row.items() if k != "curve"}, indent=2))


if __name__ == "__main__":
    main()
