"""The agent demo, measured: SmolLM2-135M-Instruct taught to call a calculator by a short SFT, then multi-turn
GRPO with the tool; held-out exact match before, after SFT and after GRPO, and GRPO steps per hour with
the rollouts in the step (synchronous) against rollouts beside training (a worker process), in one run.

    ftune convert gguf smollm2                       # first: the model, offline, into $FTUNE_HOME/models
    python benchmarks/agent_demo.py [--sft-steps 60] [--grpo-steps 8] [--beside-steps 4] [--heldout 40] [--speed-repeats 2] [--resume]

The task (ftune.datasets.tool_demo): word problems of several-digit arithmetic ("A box holds 47 pens. How
many pens are in 86 boxes and 312 loose pens?"), which a 135M model cannot compute without the tool.

1. **Data**: ``write_tool_demo_data`` writes the SFT traces (question, the call in SmolLM2's documented
   tool format, the tool's answer, the final answer), the GRPO prompts and the held-out questions.
2. **SFT**: ``lora_finetune_single_device --config smollm2/135M_lora`` on the traces (``chat_dataset``),
   saved merged (``step_N/merged``): the model GRPO starts from and its reference.
3. **GRPO**: ``lora_grpo_agent_single_device --config smollm2/135M_lora_grpo_agent`` from that model, the
   calculator environment (``ToolEnvironment`` over ``Calculator``, in its sandbox), exact match as the
   reward, ``--grpo-steps`` steps with the rollouts in the step (synchronous).
4. **Beside training**: the same GRPO for ``--beside-steps`` steps with ``max_off_policy_steps=1`` (a worker
   process samples the next step while the trainer trains this one), right after. Steps per hour of each
   run from the median of its ``step_seconds`` (the first step, with the start-up, left out).
   ``--speed-repeats N`` measures both again N - 1 times (``--beside-steps`` steps each, the run beside
   training first), so that a load that changes during the run is seen.
5. **Exact match**: greedy multi-turn rollouts (the same environment, one conversation a question) on
   the held-out questions, of the base model, the SFT model and the SFT model with the GRPO adapter.

Writes benchmarks/results/agent_demo.json, which benchmarks/figures/report.py renders into
docs/recipes/lora_grpo_agent_single_device.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from demo_runs import log_rows
from results_file import ROOT, load1, write_results

from ftune import training
from ftune.checkpointing.inference import load_inference_model
from ftune.config import instantiate, load_config
from ftune.datasets.tool_demo import HELDOUT_FILE, SFT_FILE, SYSTEM_PROMPT, TRAIN_FILE, write_tool_demo_data
from ftune.generation.multi_turn import multi_turn_rollout
from ftune.rewards import ExactMatch

MODEL, REPO = "SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"
AGENT = "smollm2/135M_lora_grpo_agent"


def run(cmd: list[str], env: dict[str, str], log: Path) -> float:
    """Run one ftune command (its output in `log`); its wall time in seconds."""
    start = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.run(cmd, env=env, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
    if code:
        sys.exit(f"agent_demo: `{' '.join(cmd)}` failed (exit {code}); its output: {log}")
    return round(time.perf_counter() - start, 1)


def agent_args(args: argparse.Namespace, data: Path, model: Path, base: Path) -> list[str]:
    """The agent config's overrides: the demo's prompts, the calculator's instructions, the budgets."""
    prompts = [f"{k}._component_=ftune.datasets.prompt_dataset" for k in ("dataset", "dataset_val")]
    return [
        "~dataset", "~dataset_val", *prompts,
        f"dataset.source={data / TRAIN_FILE}", f"dataset_val.source={data / HELDOUT_FILE}",
        "environment.system_prompt=" + json.dumps(SYSTEM_PROMPT),
        f"tokenizer.path={model}", f"checkpointer.checkpoint_dir={base}", f"checkpointer.hf_repo_id={REPO}",
        "max_turns=3", f"max_turn_tokens={args.turn_tokens}", f"max_trajectory_tokens={2 * args.turn_tokens + 16}",
    ]  # fmt: skip


def exact_match(overrides: list[str], records: list[dict], adapter_dir: Path | None = None) -> dict:
    """Greedy multi-turn rollouts of the held-out questions with the calculator: exact match and tool use."""
    cfg = load_config(AGENT, overrides)
    s = cfg.settings(training.AgentGRPOSettings)
    ckpt = instantiate(cfg.checkpointer)
    model = load_inference_model(
        ckpt, model=cfg.model, adapter_dir=adapter_dir, device=torch.device("cpu"), dtype=torch.float32
    )
    tokenizer = instantiate(cfg.tokenizer)
    agent = training.Agent.of(instantiate(cfg.environment), tokenizer, instantiate(cfg.tool_format), s)
    sampling = training.Sampling.of(s, tokenizer)
    start, rows = time.perf_counter(), []
    for i in range(0, len(records), 20):
        with torch.inference_mode():
            rows += multi_turn_rollout(
                model, records[i : i + 20], environment=agent.environment, chat=agent.chat, parse=agent.parse,
                group_size=1, limits=agent.limits, temperature=0.0, top_k=None, top_p=None,
                stop_ids=list(sampling.stop_ids), pad_id=sampling.pad_id, generator=None,
            ).rows  # fmt: skip
    match = ExactMatch(field="answer")
    correct = [match(r["prompt"], row.answer, r) for r, row in zip(records, rows)]
    called = [any(m["role"] == "tool" for m in row.messages) for row in rows]
    return {
        "accuracy": round(sum(correct) / len(records), 4),
        "num_correct": int(sum(correct)),
        "num_total": len(records),
        "tool_called": int(sum(called)),
        "example": {
            "prompt": records[0]["prompt"],
            "answer": records[0]["answer"],
            "turns": rows[0].messages[2:],  # the model's turns and the tool's answers
            "final": rows[0].answer,  # the last turn's text (also when a budget cut it)
        },
        "seconds": round(time.perf_counter() - start, 1),
    }


def speed(rows: list[dict]) -> dict:
    """Steps per hour from the median step time; the first step, which holds the start-up, left out."""
    seconds = [r["step_seconds"] for r in rows if "loss" in r][1:]
    median = statistics.median(seconds)
    return {"steps": len(seconds) + 1, "median_step_seconds": round(median, 2),
            "steps_per_hour": round(3600 / median, 1), "step_seconds": [round(x, 1) for x in seconds]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "~/.cache/ftune")))
    parser.add_argument("--out", type=Path, default=ROOT / "output/agent_demo")
    parser.add_argument(
        "--resume", action="store_true", help="keep --out and skip the stages it already holds"
    )
    parser.add_argument("--sft-steps", type=int, default=60)
    parser.add_argument("--grpo-steps", type=int, default=8, help="steps of the synchronous GRPO run (>= 3)")
    parser.add_argument("--beside-steps", type=int, default=4, help="steps of the run beside training (>= 3)")
    parser.add_argument(
        "--speed-repeats", type=int, default=1, help="measure both step rates this many times"
    )
    parser.add_argument("--heldout", type=int, default=40, help="held-out questions measured")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=2, help="prompts per GRPO step")
    parser.add_argument("--turn-tokens", type=int, default=48, help="max_turn_tokens")
    parser.add_argument("--lr", type=float, default=1e-4, help="GRPO learning rate")
    args = parser.parse_args()
    home = args.home.expanduser().resolve()
    model = home / "models" / MODEL
    if not (model / "model.safetensors").exists():
        sys.exit(f"agent_demo: no converted model in {model}; run `ftune convert gguf smollm2` first.")
    env = {**os.environ, "FTUNE_HOME": str(home)}
    ftune = [sys.executable, "-m", "ftune.cli"]
    out = args.out.resolve()
    if not args.resume:
        shutil.rmtree(out, ignore_errors=True)
    data = write_tool_demo_data(out / "data", n_heldout=args.heldout)
    heldout = [json.loads(line) for line in (data / HELDOUT_FILE).read_text().splitlines()]
    stages = out / "stages.json"  # each finished stage's result, for --resume
    result = json.loads(stages.read_text()) if args.resume and stages.exists() else {}

    def stage(name: str, fn) -> None:  # noqa: ANN001
        if name not in result:
            result[name] = {**fn(), "load_average_1min_after": load1()}
            stages.write_text(json.dumps(result, indent=2))
        print(f"agent_demo: {name}: {json.dumps(result[name])[:300]}", flush=True)

    stage("exact_match_base", lambda: exact_match(agent_args(args, data, model, model), heldout))
    sft_dir = out / "sft"
    chat = [f"{k}={v}" for k, v in (("_component_", "ftune.datasets.chat_dataset"), ("source", data / SFT_FILE),
                                     ("conversation_style", "openai"), ("max_seq_len", 256))]  # fmt: skip
    sft_cmd = [*ftune, "run", "lora_finetune_single_device", "--config", "smollm2/135M_lora", f"output_dir={sft_dir}",
               "~dataset", *[f"dataset.{c}" for c in chat], "~dataset_val", *[f"dataset_val.{c}" for c in chat],
               f"max_steps={args.sft_steps}", "save_every_n_steps=null", "run_val_every_n_steps=null",
               f"tokenizer.path={model}", f"checkpointer.checkpoint_dir={model}",
               "checkpointer.save_adapter_weights_only=false", "progress_bar=false"]  # fmt: skip
    stage("sft", lambda: {"seconds": run(sft_cmd, env, out / "sft.log")})
    sft = sft_dir / f"step_{args.sft_steps}" / "merged"
    on_sft = agent_args(args, data, model, sft)
    stage("exact_match_sft", lambda: exact_match(on_sft, heldout))

    grpo = [*ftune, "run", "lora_grpo_agent_single_device", "--config", AGENT, *on_sft,
            f"group_size={args.group_size}", f"batch_size={args.batch_size}", f"optimizer.lr={args.lr}",
            "lr_scheduler.num_warmup_steps=1", "save_every_n_steps=null", "run_val_every_n_steps=null",
            "progress_bar=false"]  # fmt: skip
    runs = {"sync": [f"max_steps={args.grpo_steps}"],
            "beside": [f"max_steps={args.beside_steps}", "max_off_policy_steps=1"]}  # fmt: skip
    for name, extra in runs.items():  # back to back, the same settings: their step times compare
        cmd = [*grpo, f"output_dir={out / name}", *extra]
        stage(f"grpo_{name}", lambda cmd=cmd, name=name: {"seconds": run(cmd, env, out / f"{name}.log"),
                                                          **speed(log_rows(out / name))})  # fmt: skip
    for i in range(
        2, args.speed_repeats + 1
    ):  # again, the other run first: a load that drifts favours neither
        for name in ("beside", "sync"):
            cmd = [
                *grpo,
                f"output_dir={out / f'{name}_{i}'}",
                f"max_steps={args.beside_steps}",
                *runs[name][1:],
            ]
            stage(f"grpo_{name}_{i}", lambda cmd=cmd, d=out / f"{name}_{i}": {"seconds": run(cmd, env, d.with_suffix(".log")),
                                                                            **speed(log_rows(d))})  # fmt: skip
    adapter = out / "sync" / f"step_{args.grpo_steps}"
    stage("exact_match_grpo", lambda: exact_match(on_sft, heldout, adapter_dir=adapter))

    def public(text: str) -> str:  # no path of this machine in a results file the docs show
        return text.replace(str(out), "output/agent_demo").replace(str(home), "$FTUNE_HOME")

    row = {
        "command": "python benchmarks/agent_demo.py " + " ".join(a for a in sys.argv[1:] if a != "--resume"),
        "sft_command": public(" ".join(["ftune", *sft_cmd[3:]])),
        "grpo_command": public(
            " ".join(["ftune", *grpo[3:], "output_dir=output/agent_demo/sync", *runs["sync"]])
        ),
        "settings": {
            k: getattr(args, k)
            for k in (
                "sft_steps",
                "grpo_steps",
                "beside_steps",
                "heldout",
                "group_size",
                "batch_size",
                "turn_tokens",
                "lr",
            )
        },  # fmt: skip
        "threads": os.environ.get("OMP_NUM_THREADS", "torch's default (the cores)"),
        **result,
        "curve": [
            {
                k: r.get(k)
                for k in ("step", "reward", "rewards/correct/mean", "step_seconds", "time/rollout_s")
            }
            for r in log_rows(out / "sync")
            if "loss" in r
        ],  # fmt: skip
    }
    note = (
        "One run on the 2-core machine, shared with other jobs (each stage's 1-minute load average is in the "
        "row): the exact matches do not depend on the load, the step rates are compared within the run."
    )
    write_results(ROOT / "benchmarks" / "results" / "agent_demo.json", "agent_demo", [row], note=note)
    print(json.dumps({k: v for k, v in row.items() if k != "curve"}, indent=2))


if __name__ == "__main__":
    main()
