"""GRPO speed: ftune's rollouts and LoRA GRPO steps against transformers' `generate` and TRL's GRPOTrainer.

    python benchmarks/grpo_vs_trl.py [--steps 3] [--repeats 3] [--rounds 3] [--threads 2] [--home ~/.cache/ftune]

Same model (SmolLM2-135M-Instruct from `ftune convert gguf smollm2`, fp32), same prompts (the demo
task's train_prompts.jsonl in dataset order, in the model's chat format: the token ids are checked
equal), same settings: 4 prompts x G=8 completions a step, at most 16 new tokens, temperature 1, no
top-k/top-p, stop at <|im_end|>; LoRA rank 16 alpha 32 on the 7 linear projections, AdamW lr 1e-4
(weight decay 0.01, cosine schedule without warm-up, clip 1.0), beta 0.04 (KL to the adapters-off
model), loss_type grpo, num_iterations 1, reward 1 for an exact match with the answer.

1. Rollouts, in one process (warm-up call each first), alternating round by round: ftune's
   `training.sample_rollout` (what the recipe runs) against transformers'
   `generate(do_sample=True, num_return_sequences=8)` on the same 4 prompts, both with the stop
   token (the recipe's setting) and without it (every row 16 tokens: the same work for both).
2. Steps, each repeat a fresh process per tool, alternating ftune, TRL, ftune, TRL...: ftune's
   `lora_grpo_single_device` for `--steps` steps (per-step `step_seconds` and `time/rollout_s` from
   its JSONL log; generation timed by wrapping `training.sample_rollout`) and TRL's GRPOTrainer with
   a peft LoraConfig (a TrainerCallback times each step end to end, as ftune's `step_seconds`; the
   generation is `_generate_single_turn`, the rollout `_generate_and_score_completions`: generation,
   rewards and the reference log-probabilities, as ftune's `time/rollout_s`). Step 1 of every run is
   warm-up and not counted; update = step - rollout.

Writes benchmarks/results/grpo_vs_trl.json; benchmarks/figures/report.py renders docs/benchmarks.md from it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import ROOT, commit, load1, write_results

MODEL = "SmolLM2-135M-Instruct"
CONFIG = "smollm2/135M_lora_grpo"
G, PROMPTS, NEW_TOKENS, LR, BETA = 8, 4, 16, 1e-4, 0.04
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def completion_lengths(completions: list[list[int]], stop_ids: set[int]) -> list[int]:
    """Each row's completion length: up to and including its first stop token, else the whole row."""
    return [next((i + 1 for i, t in enumerate(row) if t in stop_ids), len(row)) for row in completions]


def median(values: list[float]) -> float:
    if not values:
        raise ValueError("grpo_vs_trl: no measured value to take a median of (did every run fail?).")
    return statistics.median(values)


def ftune_steps(log_rows: list[dict], generation_seconds: list[float]) -> list[dict]:
    """ftune's per-step timings from its JSONL log rows (those with a loss) and the generation timer."""
    rows = [r for r in log_rows if "loss" in r]
    if len(rows) != len(generation_seconds):
        raise ValueError(
            f"grpo_vs_trl: {len(rows)} logged steps but {len(generation_seconds)} rollouts sampled; expected one "
            "rollout a step (grad_accum_steps 1, num_iterations 1, no validation)."
        )
    return [
        {"step": r["step"], "step_s": r["step_seconds"], "rollout_s": r["time/rollout_s"], "generation_s": g,
         "mean_length": r["completions/mean_length"], "reward": r["reward"]}
        for r, g in zip(rows, generation_seconds)
    ]  # fmt: skip


def trl_steps(ends: list[float], begins: list[float], generation: list[float], rollout: list[float],
              logs: list[dict], start: float) -> list[dict]:  # fmt: skip
    """TRL's per-step timings: end-to-end intervals (the first from `start`, the train begin) and timers."""
    logs = [r for r in logs if "loss" in r]
    if not len(ends) == len(begins) == len(generation) == len(rollout) == len(logs):
        raise ValueError(
            f"grpo_vs_trl: TRL timed {len(ends)} step ends, {len(begins)} begins, {len(generation)} generations, "
            f"{len(rollout)} rollouts and logged {len(logs)} steps; expected one of each a step (logging_steps 1)."
        )
    previous = [start, *ends[:-1]]
    return [
        {"step": i + 1, "step_s": e - p, "callback_s": e - b, "rollout_s": r, "generation_s": g,
         "mean_length": log["completions/mean_length"], "reward": log["reward"]}
        for i, (e, p, b, g, r, log) in enumerate(zip(ends, previous, begins, generation, rollout, logs))
    ]  # fmt: skip


def step_row(tool: str, runs: list[list[dict]], skip: int = 1) -> dict:
    """Medians over every run's steps after the first `skip` (warm-up), and each run's median step time."""
    kept = [s for run in runs for s in run[skip:]]
    step, rollout, gen = (median([s[k] for s in kept]) for k in ("step_s", "rollout_s", "generation_s"))
    tokens = [s["mean_length"] * G * PROMPTS / s["generation_s"] for s in kept]
    return {
        "tool": tool,
        "steps_measured": len(kept),
        "step_seconds": round(step, 2),
        "rollout_seconds": round(rollout, 2),
        "generation_seconds": round(gen, 2),
        "scoring_and_reference_seconds": round(median([s["rollout_s"] - s["generation_s"] for s in kept]), 2),
        "update_seconds": round(median([s["step_s"] - s["rollout_s"] for s in kept]), 2),
        "generation_tokens_per_second": round(median(tokens), 1),
        "mean_completion_length": round(statistics.mean(s["mean_length"] for s in kept), 2),
        "mean_reward": round(statistics.mean(s["reward"] for s in kept), 3),
        "run_step_seconds": [round(median([s["step_s"] for s in run[skip:]]), 2) for run in runs],
        "steps": [[{k: round(v, 3) for k, v in s.items()} for s in run] for run in runs],
    }


def rollout_row(tool: str, stop: bool, calls: list[dict]) -> dict:
    """Medians of one tool's rollouts (calls: {"seconds", "tokens"}): completion tokens a second, time a rollout."""
    return {
        "tool": tool,
        "stop_token": stop,
        "rollouts": len(calls),
        "tokens_per_second": round(median([c["tokens"] / c["seconds"] for c in calls]), 1),
        "seconds_per_rollout": round(median([c["seconds"] for c in calls]), 3),
        "seconds_range": [
            round(min(c["seconds"] for c in calls), 3),
            round(max(c["seconds"] for c in calls), 3),
        ],
        "mean_completion_tokens": round(statistics.mean(c["tokens"] for c in calls) / (G * PROMPTS), 2),
    }


def _records(home: Path, n: int) -> list[dict]:
    lines = (home / "data" / "demo" / "train_prompts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines[:n]]


def _hf_ids(tok, prompt: str) -> list[int]:
    ids = tok.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
    )
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def child_rollouts(home: Path, rounds: int) -> dict:
    """Part 1, in this process: ftune's sample_rollout against transformers' generate, alternating."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ftune import training
    from ftune.checkpointing import load_hf
    from ftune.data import collate_prompts
    from ftune.datasets import demo_prompt_dataset
    from ftune.models.smollm2 import smollm2_tokenizer

    folder = home / "models" / MODEL
    ftok = smollm2_tokenizer(str(folder), max_seq_len=256)
    dataset = demo_prompt_dataset(ftok, data_dir=str(home / "data" / "demo"))
    prompts = collate_prompts([dataset[i] for i in range(PROMPTS)])
    tok = AutoTokenizer.from_pretrained(folder)
    same = all(_hf_ids(tok, p) == t for p, t in zip(prompts.prompts, prompts.tokens))
    ours = load_hf(folder, dtype=torch.float32).eval()
    theirs = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    x = torch.tensor(prompts.tokens)  # every demo prompt has the same length: no padding
    stops = set(ftok.stop_tokens)

    def ftune_call(stop: bool, epoch: int) -> dict:
        sampling = training.Sampling(
            G, NEW_TOKENS, 1.0, None, None, tuple(stops) if stop else (), ftok.pad_id, 0
        )
        start = time.perf_counter()
        rollout = training.sample_rollout(ours, prompts, sampling, epoch=epoch)
        return {"seconds": time.perf_counter() - start, "tokens": int(rollout.lengths.sum())}

    def hf_call(stop: bool, epoch: int) -> dict:
        torch.manual_seed(epoch)
        kw = {"eos_token_id": sorted(stops)} if stop else {"min_new_tokens": NEW_TOKENS}
        start = time.perf_counter()
        with torch.no_grad():
            out = theirs.generate(x, attention_mask=torch.ones_like(x), do_sample=True, num_return_sequences=G,
                                  max_new_tokens=NEW_TOKENS, temperature=1.0, top_k=0, top_p=1.0,
                                  pad_token_id=ftok.pad_id, **kw)  # fmt: skip
        seconds = time.perf_counter() - start
        new = out[:, x.shape[1] :].tolist()
        return {"seconds": seconds, "tokens": sum(completion_lengths(new, stops if stop else set()))}

    calls: dict[str, list[dict]] = {}
    for stop in (True, False):
        ftune_call(stop, 0), hf_call(stop, 0)  # warm-up: first-call allocations, lazy imports
    for r in range(1, rounds + 1):
        for stop in (True, False):
            calls.setdefault(f"ftune/{stop}", []).append(ftune_call(stop, r))
            calls.setdefault(f"transformers/{stop}", []).append(hf_call(stop, r))
    return {"calls": calls, "same_prompt_tokens": same, "prompt_tokens": [len(t) for t in prompts.tokens]}


def child_ftune(home: Path, steps: int, out: Path) -> dict:
    """Part 2, ftune: the recipe run in this process as `ftune run` runs it, its rollouts timed."""
    from ftune import training
    from ftune.cli.main import main as ftune_main

    seconds: list[float] = []
    sample = training.sample_rollout

    def timed_sample(*args, **kwargs):
        start = time.perf_counter()
        rollout = sample(*args, **kwargs)
        seconds.append(time.perf_counter() - start)
        return rollout

    training.sample_rollout = timed_sample  # the recipe looks it up as training.sample_rollout each step
    overrides = [f"output_dir={out}", f"max_steps={steps}", "shuffle=false", "save_every_n_steps=null",
                 "run_val_every_n_steps=null", "progress_bar=false", f"group_size={G}", f"batch_size={PROMPTS}",
                 f"max_new_tokens={NEW_TOKENS}", "temperature=1.0", f"optimizer.lr={LR}", f"loss.beta={BETA}",
                 "loss.loss_type=grpo", "num_iterations=1", "dtype=fp32", "peft.rank=16", "peft.alpha=32",
                 "lr_scheduler.num_warmup_steps=0"]  # fmt: skip
    code = ftune_main(["run", "lora_grpo_single_device", "--config", CONFIG, *overrides])
    if code:
        raise SystemExit(f"grpo_vs_trl: the ftune recipe failed (exit {code}).")
    logs = [
        json.loads(line)
        for f in sorted((out / "logs").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    return {
        "steps": ftune_steps(logs, seconds),
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
    }


def child_trl(home: Path, steps: int, out: Path) -> dict:
    """Part 2, TRL: GRPOTrainer with a peft LoraConfig on the same records, timed by a callback and wrappers."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    folder = home / "models" / MODEL
    records = _records(home, steps * PROMPTS)
    tok = AutoTokenizer.from_pretrained(folder)
    expected = [_hf_ids(tok, r["prompt"]) for r in records for _ in range(G)]
    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]} for r in records]
    )

    def exact_match(completions, answer, **_):
        return [
            float(" ".join(c[0]["content"].split()) == " ".join(a.split()))
            for c, a in zip(completions, answer)
        ]

    begins, ends, start = [], [], []

    class Timer(TrainerCallback):
        def on_train_begin(self, *_, **__):
            start.append(time.perf_counter())

        def on_step_begin(self, *_, **__):
            begins.append(time.perf_counter())

        def on_step_end(self, *_, **__):
            ends.append(time.perf_counter())

    args = GRPOConfig(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=G * PROMPTS, gradient_accumulation_steps=1,
        num_generations=G, generation_batch_size=G * PROMPTS, max_completion_length=NEW_TOKENS, temperature=1.0,
        top_k=0, top_p=1.0, learning_rate=LR, weight_decay=0.01, lr_scheduler_type="cosine", warmup_steps=0,
        max_grad_norm=1.0, optim="adamw_torch", beta=BETA, loss_type="grpo", num_iterations=1, epsilon=0.2,
        scale_rewards="group", shuffle_dataset=False, use_vllm=False, bf16=False, fp16=False, use_cpu=True,
        activation_checkpointing=False, report_to="none", logging_steps=1, save_strategy="no", seed=0,
        dataloader_num_workers=0, disable_tqdm=True,
    )  # fmt: skip
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=[exact_match], args=args, train_dataset=data,
                          processing_class=tok, peft_config=lora, callbacks=[Timer()])  # fmt: skip
    generation, rollout, prompt_ids = [], [], []

    def timer(fn, into: list[float], keep_prompts: bool = False):
        def wrapped(*a, **kw):
            if keep_prompts:
                prompt_ids.extend(list(p) for p in a[0])
            t = time.perf_counter()
            result = fn(*a, **kw)
            into.append(time.perf_counter() - t)
            return result

        return wrapped

    trainer._generate_single_turn = timer(trainer._generate_single_turn, generation, keep_prompts=True)
    trainer._generate_and_score_completions = timer(trainer._generate_and_score_completions, rollout)
    trainer.train()
    logs = [r for r in trainer.state.log_history if "loss" in r]
    return {"steps": trl_steps(ends, begins, generation, rollout, logs, start[0]), "same_prompt_tokens": prompt_ids == expected,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}  # fmt: skip


def uncommitted() -> list[str]:
    """The code files (ftune/, recipes/, benchmarks/ but its results) that differ from HEAD in the work tree."""
    paths = ["ftune", "recipes", "benchmarks", ":(exclude)benchmarks/results"]
    out = subprocess.run(["git", "status", "--porcelain", "--", *paths], capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    return sorted(line[3:] for line in out.stdout.splitlines())


def spawn(kind: str, args: argparse.Namespace, work: Path, n: int) -> dict:
    """One child process (its own interpreter, `--threads` threads); its JSON answer."""
    out, answer = work / f"{kind}_{n}", work / f"{kind}_{n}.json"
    cmd = [sys.executable, __file__, "--child", kind, "--child-out", str(out), "--child-answer", str(answer),
           "--home", str(args.home), "--steps", str(args.steps), "--rounds", str(args.rounds)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "FTUNE_HOME": str(args.home),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    log = work / f"{kind}_{n}.log"
    with open(log, "w") as f:
        code = subprocess.run(cmd, env=env, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    if code:
        sys.exit(f"grpo_vs_trl: the {kind} run failed (exit {code}); its output: {log}")
    print(f"{kind} run {n} done", flush=True)
    return json.loads(answer.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps a run (the first is warm-up)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each tool, alternating")
    parser.add_argument("--rounds", type=int, default=3, help="rollouts of each tool and stop setting")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "~/.cache/ftune")))
    parser.add_argument("--write", type=Path, default=ROOT / "benchmarks" / "results" / "grpo_vs_trl.json")
    parser.add_argument("--child", choices=["rollouts", "ftune", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-answer", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.home = args.home.expanduser().resolve()
    if args.child:
        if args.child == "rollouts":
            answer = child_rollouts(args.home, args.rounds)
        else:
            answer = {"ftune": child_ftune, "trl": child_trl}[args.child](
                args.home, args.steps, args.child_out
            )
        args.child_answer.write_text(json.dumps(answer))
        return
    if args.steps < 2 or args.repeats < 1 or args.rounds < 1:
        sys.exit(f"grpo_vs_trl: need --steps >= 2 (step 1 is warm-up), --repeats >= 1, --rounds >= 1; got "
                 f"{args.steps}, {args.repeats}, {args.rounds}.")  # fmt: skip
    if not (args.home / "models" / MODEL / "model.safetensors").exists():
        sys.exit(
            f"grpo_vs_trl: no {MODEL} under {args.home / 'models'}; run `ftune convert gguf smollm2` first."
        )
    import transformers
    import trl

    head, dirty = commit().removesuffix("+dirty"), uncommitted()
    load = [load1()]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo_vs_trl_") as tmp:
        work = Path(tmp)
        part1 = spawn("rollouts", args, work, 0)
        runs: dict[str, list[dict]] = {"ftune": [], "trl": []}
        for n in range(args.repeats):
            for kind in runs:  # alternating: ftune, TRL, ftune, TRL, ...
                runs[kind].append(spawn(kind, args, work, n))
    load.append(load1())
    rollout_rows = [
        rollout_row(key.split("/")[0], key.endswith("True"), calls) for key, calls in part1["calls"].items()
    ]
    steps = [
        step_row("ftune", [r["steps"] for r in runs["ftune"]]),
        step_row("TRL", [r["steps"] for r in runs["trl"]]),
    ]
    for row, kind in zip(steps, runs):
        row["max_rss_mib"] = max(r["max_rss_mib"] for r in runs[kind])
    same = part1["same_prompt_tokens"] and all(r["same_prompt_tokens"] for r in runs["trl"])
    workload = {"model": MODEL, "dtype": "fp32", "prompts_per_step": PROMPTS, "group_size": G,
                "max_new_tokens": NEW_TOKENS, "prompt_tokens": part1["prompt_tokens"], "lora_rank": 16,
                "lora_alpha": 32, "lr": LR, "beta": BETA, "loss_type": "grpo", "steps_per_run": args.steps,
                "repeats": args.repeats, "rollout_rounds": args.rounds, "same_prompt_tokens": same}  # fmt: skip
    write_results(
        args.write,
        "grpo_vs_trl",
        [{"part": "rollout", **r} for r in rollout_rows] + [{"part": "step", **r} for r in steps],
        note=f"transformers {transformers.__version__}, trl {trl.__version__}; {args.threads} threads a process; "
        f"{round(time.perf_counter() - started)} s in all",
        workload=workload,
        # HEAD, and the uncommitted code files of the shared work tree by name (not a bare +dirty).
        commit=head,
        uncommitted=dirty,
        load_average_1min=load,
    )
    for row in rollout_rows + steps:
        print({k: v for k, v in row.items() if k != "steps"})


if __name__ == "__main__":
    main()
