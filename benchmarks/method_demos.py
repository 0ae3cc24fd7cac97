"""The DPO and distillation demos on SmolLM2-135M-Instruct and the quickstart's date task, measured.

    ./quickstart.sh                                   # first: the data, the model, the KD teacher's adapter
    python benchmarks/method_demos.py [--only dpo|kd] [--home ~/.cache/ftune]

- **DPO**: ``lora_dpo_single_device --config smollm2/135M_demo_lora_dpo`` on the task's preference
  pairs (chosen: the right date; rejected: the date echoed, day and month swapped, or the date in a
  sentence). The held-out pairs' log-probability accuracy before (the reference, i.e. the base model)
  and after, the DPO reward accuracy after, and greedy exact match on the held-out prompts before and
  after (``ftune run eval``).
- **KD**: ``knowledge_distillation_single_device --config smollm2/360M_to_135M_kd_lora`` with the
  teacher swapped for the quickstart's model (SmolLM2-135M-Instruct with the quickstart's LoRA adapter
  merged, ``teacher_adapter_dir``) and ``kd_ratio=1``: the student learns from the teacher's token
  distributions alone (no cross-entropy on the labels). Exact match of the base, the teacher and the
  student.

Writes benchmarks/results/method_demos.json, from which benchmarks/figures/report.py renders the figures of
docs/recipes/lora_dpo_single_device.md and docs/recipes/knowledge_distillation_single_device.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from results_file import ROOT, load1, write_results

DPO_CONFIG = ROOT / "recipes" / "configs" / "smollm2" / "135M_demo_lora_dpo.yaml"
MODEL, REPO = "SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"


def run(cmd: list[str], env: dict[str, str], log: Path) -> float:
    """Run one ftune command, its output in `log`; its wall time in seconds."""
    start = time.perf_counter()
    with open(log, "w") as f:
        done = subprocess.run(cmd, env=env, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode:
        sys.exit(f"method_demos: `{' '.join(cmd)}` failed (exit {done.returncode}); its output: {log}")
    return round(time.perf_counter() - start, 1)


def last_with(logs: Path, key: str) -> dict:
    (metrics,) = logs.glob("*.jsonl")
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [r for r in rows if key in r][-1]


def _key(row: dict) -> tuple[str, float]:
    return row["demo"], row.get("lr", 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=["dpo", "kd"], help="run one demo (the other's row is kept)")
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "~/.cache/ftune")))
    parser.add_argument("--teacher-adapter", type=Path, default=ROOT / "output/quickstart/lora/step_60")
    parser.add_argument("--out", type=Path, default=ROOT / "output/method_demos")
    parser.add_argument("--steps", type=int, default=60, help="training steps of each demo")
    parser.add_argument(
        "--dpo-lr", type=float, default=None, help="the DPO demo's lr (default: the config's)"
    )
    args = parser.parse_args()
    home = args.home.expanduser().resolve()
    model, data = home / "models" / MODEL, home / "data" / "demo"
    if not (model / "model.safetensors").exists() or not (data / "heldout.jsonl").exists():
        sys.exit(f"method_demos: no converted model or demo data under {home}; run ./quickstart.sh first.")
    env = {**os.environ, "FTUNE_HOME": str(home)}
    ftune = [sys.executable, "-m", "ftune.cli"]
    if not (data / "heldout_pref.jsonl").exists():
        code = f"from ftune.datasets import write_demo_preference_data as w; w({str(data)!r})"
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    model_args = [
        f"tokenizer.path={model}",
        f"checkpointer.checkpoint_dir={model}",
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

    def train(name: str, recipe: str, config: str, extra: list[str]) -> tuple[Path, float, list[float]]:
        run_dir = out / name
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = [*ftune, "run", recipe, "--config", config, f"output_dir={run_dir}", *model_args]
        cmd += [f"max_steps={args.steps}", "progress_bar=false", *extra]
        load = [load1()]
        seconds = run(cmd, env, out / f"train_{name}.log")
        return run_dir, seconds, [*load, load1()]

    path = ROOT / "benchmarks" / "results" / "method_demos.json"
    rows: dict[str, dict] = {}
    base = exact_match("base", [])
    if args.only in (None, "dpo"):
        lr = [] if args.dpo_lr is None else [f"optimizer.lr={args.dpo_lr}"]
        run_dir, seconds, load = train("dpo", "lora_dpo_single_device", "smollm2/135M_demo_lora_dpo",
                                       [f"run_val_every_n_steps={args.steps}", *lr])  # fmt: skip
        val = last_with(run_dir / "logs", "val_logps/accuracy")
        rows[f"dpo {lr}"] = {
            "demo": "dpo",
            "command": f"ftune run lora_dpo_single_device --config smollm2/135M_demo_lora_dpo max_steps={args.steps}"
            + "".join(f" {x}" for x in lr),
            "lr": args.dpo_lr or float(yaml.safe_load(DPO_CONFIG.read_text())["optimizer"]["lr"]),
            "steps": args.steps,
            "train_seconds": seconds,
            "load_average_1min": load,
            "val_pairs": 100,
            "logps_accuracy_before": val["val_logps/reference_accuracy"],
            "logps_accuracy_after": val["val_logps/accuracy"],
            "rewards_accuracy_after": val["val_rewards/accuracy"],
            "rewards_margin_after": val["val_rewards/margin"],
            "rewards_chosen_after": val["val_rewards/chosen"],
            "exact_match_before": base,
            "exact_match_after": exact_match("dpo", [f"adapter_dir={run_dir / f'step_{args.steps}'}"]),
        }
    if args.only in (None, "kd"):
        if not (args.teacher_adapter / "adapter_config.json").exists():
            sys.exit(
                f"method_demos: no teacher adapter at {args.teacher_adapter}; run ./quickstart.sh first."
            )
        teacher = [
            "teacher_model._component_=ftune.models.smollm2.smollm2_135m",
            f"teacher_tokenizer.path={model}",
            f"teacher_checkpointer.checkpoint_dir={model}",
            f"teacher_checkpointer.hf_repo_id={REPO}",
            f"teacher_adapter_dir={args.teacher_adapter}",
        ]
        run_dir, seconds, load = train("kd", "knowledge_distillation_single_device", "smollm2/360M_to_135M_kd_lora",
                                       [*teacher, "loss.kd_ratio=1.0", "run_val_every_n_steps=null"])  # fmt: skip
        rows["kd"] = {
            "demo": "kd",
            "command": "ftune run knowledge_distillation_single_device --config smollm2/360M_to_135M_kd_lora "
            f"max_steps={args.steps} loss.kd_ratio=1.0 teacher_model._component_=ftune.models.smollm2.smollm2_135m "
            "teacher_adapter_dir=output/quickstart/lora/step_60 (teacher paths: the SmolLM2-135M-Instruct folder)",
            "steps": args.steps,
            "train_seconds": seconds,
            "load_average_1min": load,
            "exact_match_base": base,
            "exact_match_teacher": exact_match("teacher", [f"adapter_dir={args.teacher_adapter}"]),
            "exact_match_student": exact_match("kd", [f"adapter_dir={run_dir / f'step_{args.steps}'}"]),
        }
    # Rows of other demos and of other settings are kept (read now: another run may have written them).
    kept = json.loads(path.read_text())["rows"] if path.exists() else []
    new = {_key(r) for r in rows.values()}
    all_rows = [r for r in kept if _key(r) not in new] + list(rows.values())
    write_results(path, "method_demos", sorted(all_rows, key=_key))
    print(json.dumps(list(rows.values()), indent=2))


if __name__ == "__main__":
    main()
