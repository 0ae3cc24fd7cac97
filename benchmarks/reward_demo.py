"""The reward demo, measured: a reward model trained on the demo's preference pairs, GRPO with it against
GRPO with the exact-match rule, and PPO's first steps with it, all from the quickstart's SFT model.

    ./quickstart.sh                                  # first: the model and the demo data
    python benchmarks/reward_demo.py [--sft-merged DIR] [--grpo-steps 25] [--minutes 12] [--ppo-steps 10]

1. **Reward model**: ``reward_model_single_device --config smollm2/135M_demo_lora_rm`` from the SFT model
   (LoRA adapters and the score head; saved merged too, ``step_<N>/merged``: PPO's reward and value
   model), on ``train_pref.jsonl``; its validation is the held-out pair accuracy (``heldout_pref.jsonl``,
   all 100 pairs: the chosen answer scored above the rejected one).
2. **GRPO**, two runs side by side from the same SFT model with the same settings and step budget
   (``lora_grpo_single_device --config smollm2/135M_reward_model_lora_grpo``): the reward model alone
   (``weights: {correct: 0, preference: 1}``: the rule is logged, not trained on) against the
   exact-match rule alone (``{correct: 1, preference: 0}``); each stops after ``--grpo-steps`` steps or
   ``--minutes``, whichever comes first (SIGTERM: the recipe saves the step it is at).
3. **PPO**: ``ppo_full_finetune_single_device --config smollm2/135M_ppo`` for ``--ppo-steps`` steps, the
   policy and its reference the SFT model, the reward model and the value model's start the merged
   reward model (as torchtune's config starts the value model from the reward model), the config's
   settings as shipped (lr 1e-6, kl_coeff 0.01).
4. **Exact match** (``ftune run eval``, greedy, the 100 held-out prompts) of the SFT model, of each GRPO
   adapter over it and of the PPO policy.

Each stage is skipped when its output exists under --out (rerun after an interruption; delete a
folder to redo its stage). Writes benchmarks/results/reward_demo.json, from which
benchmarks/figures/report.py renders the figures of docs/recipes/reward_model_single_device.md and
docs/recipes/ppo_full_finetune_single_device.md. ``--dry-run`` prints the commands and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from demo_runs import demo_parser, log_rows
from results_file import ROOT, load1, write_results

MODEL, REPO = "SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"
ARMS = {
    "reward_model": {"correct": 0.0, "preference": 1.0},
    "exact_match": {"correct": 1.0, "preference": 0.0},
}
GRPO_KEYS = ("step", "lr", "reward", "rewards/correct/mean", "rewards/preference/mean", "kl", "step_seconds")
PPO_KEYS = ("step", "lr", "loss", "rlhf_reward", "scores", "kl", "kl_reward", "approx_policy_kl", "clipfrac",
            "response_lengths", "step_seconds")  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = demo_parser(__doc__, "reward_demo")
    parser.add_argument("--rm-steps", type=int, default=20, help="reward model steps (the config: 60)")
    parser.add_argument("--grpo-steps", type=int, default=20, help="GRPO steps of each run at most")
    parser.add_argument("--minutes", type=float, default=12.0, help="GRPO time budget of each run")
    parser.add_argument("--lr", type=float, default=2e-4, help="GRPO's learning rate (grpo_demo.py's run)")
    parser.add_argument("--batch-size", type=int, default=2, help="GRPO prompts a step")
    parser.add_argument("--beta", type=float, default=0.0, help="GRPO's KL coefficient")
    parser.add_argument("--ppo-steps", type=int, default=10, help="PPO optimizer steps")
    parser.add_argument("--dry-run", action="store_true", help="print the commands; run nothing")
    args = parser.parse_args(argv)
    for name in ("rm_steps", "grpo_steps", "ppo_steps", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    if args.minutes <= 0:
        parser.error(f"--minutes must be > 0, got {args.minutes}.")
    return args


def complete_steps(run_dir: Path) -> list[int]:
    """The step numbers of `run_dir`'s complete step folders, ascending."""
    return sorted(int(p.name[5:]) for p in run_dir.glob("step_*") if (p / ".complete").is_file())


def accuracy_by_kind(tokenizer_path: Path, base: Path, adapter: Path, pairs: Path) -> dict[str, list[int]]:
    """The reward model's held-out pair accuracy by the kind of rejected answer: kind -> [right, pairs]."""
    from ftune.evaluation import RewardModel
    from ftune.models.smollm2 import smollm2_tokenizer

    tokenizer = smollm2_tokenizer(path=str(tokenizer_path), max_seq_len=256)  # the demo config's
    rm = RewardModel(tokenizer, checkpoint_dir=base, adapter_dir=adapter, batch_size=20)
    rows = [json.loads(line) for line in pairs.read_text().splitlines() if line.strip()]
    prompts = [r["chosen"][0]["content"] for r in rows]
    scores = {side: rm.score_batch(prompts, [r[side][1]["content"] for r in rows], [{}] * len(rows))
              for side in ("chosen", "rejected")}  # fmt: skip
    kinds: dict[str, list[int]] = {}
    for r, chosen, rejected in zip(rows, scores["chosen"], scores["rejected"], strict=True):
        counts = kinds.setdefault(r.get("rejected_kind", "all"), [0, 0])
        counts[0], counts[1] = counts[0] + (chosen > rejected), counts[1] + 1
    return dict(sorted(kinds.items()))


class Runner:
    """Starts ftune commands as subprocesses (or prints them with --dry-run); records their time and load."""

    def __init__(self, out: Path, env: dict[str, str], dry: bool) -> None:
        self.out, self.env, self.dry = out, env, dry
        self.ftune = [sys.executable, "-m", "ftune.cli"]

    def start(self, name: str, args: list[str]) -> tuple | None:
        cmd = [*self.ftune, *args]
        print(f"[{name}] ftune {' '.join(args)}", flush=True)
        if self.dry:
            return None
        log = open(self.out / f"{name}.log", "w")  # noqa: SIM115 (closed in finish)
        proc = subprocess.Popen(cmd, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        return name, args, proc, log, time.perf_counter(), load1()

    def finish(self, started: tuple | None, minutes: float | None = None) -> dict:
        """Wait for a started command (SIGTERM once it has run `minutes`); its time and load in `<name>.meta.json`."""
        if started is None:
            return {}
        name, args, proc, log, start, load = started
        left = None if minutes is None else max(1.0, minutes * 60 - (time.perf_counter() - start))
        try:
            code = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the recipe saves the step it is at, then exits
            code = proc.wait()
        log.close()
        seconds = round(time.perf_counter() - start, 1)
        if code and not (minutes is not None and seconds >= minutes * 60):
            sys.exit(f"reward_demo: `ftune {' '.join(args)}` failed (exit {code}); its output: {log.name}")
        meta = {"args": args, "seconds": seconds, "load_average_1min": [load, load1()]}
        (self.out / f"{name}.meta.json").write_text(json.dumps(meta, indent=1))
        return meta


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    home = args.home.expanduser().resolve()
    model, data = home / "models" / MODEL, home / "data" / "demo"
    if not args.dry_run and not (
        (model / "model.safetensors").exists() and (data / "train_pref.jsonl").exists()
    ):
        sys.exit(
            f"reward_demo: no converted model or demo data (train_pref.jsonl) under {home}; run ./quickstart.sh."
        )
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    run = Runner(out, {**os.environ, "FTUNE_HOME": str(home)}, args.dry_run)
    meta = lambda name: json.loads((out / f"{name}.meta.json").read_text())  # noqa: E731
    data_args = [f"dataset.data_dir={data}", f"dataset_val.data_dir={data}", "progress_bar=false"]

    sft = args.sft_merged
    if sft is None:  # the quickstart's SFT run, merged
        sft = out / "sft" / "step_60" / "merged"
        if not (out / "sft" / "step_60" / ".complete").is_file():
            run.finish(run.start("sft", ["run", "lora_finetune_single_device", "--config", "smollm2/135M_lora",
                f"output_dir={out / 'sft'}", "max_steps=60", *data_args, "save_every_n_steps=null",
                "checkpointer.save_adapter_weights_only=false"]))  # fmt: skip
    sft = sft.resolve()
    model_args = [
        f"tokenizer.path={model}",
        f"checkpointer.checkpoint_dir={sft}",
        f"checkpointer.hf_repo_id={REPO}",
    ]

    def start_eval(name: str, extra: list[str], checkpoint: Path = sft) -> tuple | None:
        if (out / f"eval_{name}.json").is_file():
            return None
        return run.start(f"eval_{name}", ["run", "eval", "--config", "eval", f"tokenizer.path={model}",
            f"checkpointer.checkpoint_dir={checkpoint}", f"checkpointer.hf_repo_id={REPO}", *extra,
            f"heldout_file={data / 'heldout.jsonl'}", "limit=100", f"output_file={out / f'eval_{name}.json'}"])  # fmt: skip

    def exact_match(name: str) -> dict:
        em = json.loads((out / f"eval_{name}.json").read_text())["exact_match"]
        return {k: em[k] for k in ("accuracy", "num_correct", "num_total")}

    evals = [start_eval("sft", [])]
    # 1. The reward model (adapters and head; merged too, for PPO).
    rm_dir = out / "rm"
    rm_step = rm_dir / f"step_{args.rm_steps}"
    if not (rm_step / ".complete").is_file():
        run.finish(run.start("rm", ["run", "reward_model_single_device", "--config", "smollm2/135M_demo_lora_rm",
            f"output_dir={rm_dir}", *model_args, *data_args, f"max_steps={args.rm_steps}",
            f"run_val_every_n_steps={args.rm_steps}", "checkpointer.save_adapter_weights_only=false"]))  # fmt: skip

    # 2. GRPO: the reward model against the rule; 3. PPO; side by side.
    started = {}
    for arm, weights in ARMS.items():
        run_dir = out / f"grpo_{arm}"
        if complete_steps(run_dir) and (run_dir / "done").is_file():
            continue
        started[arm] = run.start(f"grpo_{arm}", ["run", "lora_grpo_single_device", "--config",
            "smollm2/135M_reward_model_lora_grpo", f"output_dir={run_dir}", *model_args, *data_args,
            f"max_steps={args.grpo_steps}", "save_every_n_steps=null", "run_val_every_n_steps=null",
            f"optimizer.lr={args.lr}", f"batch_size={args.batch_size}", f"loss.beta={args.beta}",
            *(f"rewards.weights.{k}={v}" for k, v in weights.items()),
            f"rewards.rewards.preference.adapter_dir={rm_step}"])  # fmt: skip
    ppo_dir = out / "ppo"
    ppo = None
    if not (ppo_dir / f"step_{args.ppo_steps}" / ".complete").is_file():
        ppo = run.start("ppo", ["run", "ppo_full_finetune_single_device", "--config", "smollm2/135M_ppo",
            f"output_dir={ppo_dir}", *model_args, *data_args, f"max_steps={args.ppo_steps}",
            "save_every_n_steps=null", f"value_checkpointer.checkpoint_dir={rm_step / 'merged'}",
            f"reward_checkpointer.checkpoint_dir={rm_step / 'merged'}"])  # fmt: skip
    for arm, proc in started.items():
        run.finish(proc, args.minutes)
        if not args.dry_run:
            (out / f"grpo_{arm}" / "done").write_text("")
    run.finish(ppo)

    # 4. Exact match on the held-out prompts (the SFT model's ran beside the reward model).
    for arm in ARMS:
        steps = complete_steps(out / f"grpo_{arm}")[-1:] or [args.grpo_steps]
        evals.append(start_eval(f"grpo_{arm}", [f"adapter_dir={out / f'grpo_{arm}' / f'step_{steps[0]}'}"]))
    evals.append(start_eval("ppo", [], ppo_dir / f"step_{args.ppo_steps}"))
    for started in evals:
        run.finish(started)
    if args.dry_run:
        return
    ems = {name: exact_match(name) for name in ("sft", *(f"grpo_{arm}" for arm in ARMS), "ppo")}

    def public(text: str) -> str:  # no path of this machine in a results file the docs show
        text = text.replace(str(sft), "<SFT model>").replace(str(out), "output/reward_demo")
        return text.replace(str(home), "$FTUNE_HOME").replace(str(ROOT) + "/", "")

    def resolved(arg: str) -> str:  # a relative path given on the command line, as public() finds it
        return str(Path(arg).resolve()) if arg.startswith(".") and Path(arg).exists() else arg

    def stage(name: str, keys: tuple[str, ...] | None = None, run_dir: Path | None = None) -> dict:
        m = meta(name)
        row = {"command": public(" ".join(["ftune", *m["args"]])), "seconds": m["seconds"],
               "load_average_1min": m["load_average_1min"]}  # fmt: skip
        if keys is not None:
            rows = [r for r in log_rows(run_dir) if "loss" in r]
            row["steps"] = rows[-1]["step"]
            row["curve"] = [{k: r.get(k) for k in keys} for r in rows]
        return row

    rm = stage("rm")
    kinds_file = out / "rm_accuracy_by_kind.json"
    if not kinds_file.is_file():
        kinds = accuracy_by_kind(model, sft, rm_step, data / "heldout_pref.jsonl")
        kinds_file.write_text(json.dumps(kinds))
    rm["val_accuracy_by_rejected_kind"] = json.loads(kinds_file.read_text())
    rm["val"] = [{k: r[k] for k in r if k == "step" or k.startswith("val_")}
                 for r in log_rows(rm_dir) if "val_accuracy" in r]  # fmt: skip
    rm["train_accuracy_last10"] = round(sum(r["accuracy"] for r in log_rows(rm_dir) if "accuracy" in r
                                            and r["step"] > args.rm_steps - 10) / min(10, args.rm_steps), 4)  # fmt: skip
    result = {
        "command": public(" ".join(["python benchmarks/reward_demo.py", *map(resolved, sys.argv[1:] if argv is None else argv)])),
        "sft_model": "the quickstart's SFT run (60 LoRA steps of smollm2/135M_lora), merged",
        "threads": os.environ.get("OMP_NUM_THREADS", "torch's default (the cores)"),
        "settings": {"rm_steps": args.rm_steps, "grpo_steps": args.grpo_steps, "minutes": args.minutes,
                     "lr": args.lr, "batch_size": args.batch_size, "beta": args.beta, "ppo_steps": args.ppo_steps},
        "reward_model": rm,
        "exact_match_sft": ems["sft"],
        "grpo": [{"arm": arm, "weights": ARMS[arm], **stage(f"grpo_{arm}", GRPO_KEYS, out / f"grpo_{arm}"),
                  "exact_match": ems[f"grpo_{arm}"]} for arm in ARMS],
        "ppo": {**stage("ppo", PPO_KEYS, ppo_dir), "exact_match": ems["ppo"],
                "value_model": "the reward model (merged), as torchtune's config starts it"},
    }  # fmt: skip
    note = ("OMP_NUM_THREADS=1, the machine's two cores shared with other jobs; the two GRPO runs and PPO ran side by "
            "side, so their times are not speed figures.")  # fmt: skip
    path = ROOT / "benchmarks" / "results" / "reward_demo.json"  # the command without this machine's paths
    write_results(path, "reward_demo", [result], note=note, command=result["command"])
    print(json.dumps({k: v for k, v in result.items() if k not in ("grpo", "ppo")}, indent=1))


if __name__ == "__main__":
    main()
