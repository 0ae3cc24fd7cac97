"""The memory plan (`ftune plan`) against the measured peak of real runs.

    python benchmarks/memory_plan.py                       # every run below (tens of minutes on 2 cores)
    python benchmarks/memory_plan.py --only sft-full-512 dpo-lora-512
    python benchmarks/memory_plan.py --repredict           # recompute the predictions of the results file

Each run is a shipped recipe through its real entry point (`ftune run`, `--nproc_per_node 2` for
world size 2) on a SmolLM2-architecture checkpoint with random weights (the memory a step takes
does not depend on the weights' values): 135M (SmolLM2-135M's sizes) or a 12-layer cut of it, the
KD teacher at SmolLM2-360M's sizes. The tokenizer is tests/assets/tiny_checkpoint.py's byte-level BPE
(the model keeps its 49,152-row vocabulary: the logits, the loss's chunks and the embedding are
full size). Data makes every row as long as the config allows, so the plan's bound is what runs:
the demo task packed into rows of `tokenizer.max_seq_len` (SFT, KD), preference pairs whose answers
are truncated at it (DPO), prompts cut at `dataset.max_prompt_len` with completions that run to
`max_new_tokens` (GRPO: a random model rarely samples a stop token). 3 steps, fp32, no checkpoint
until the end. Measured: the peak RSS rank 0's DiskLogger logs after the last step (VmHWM: model
loading included, the final save not). Predicted: `ftune.planning.plan` of the same config and
overrides, per rank. Memory does not depend on the machine's load; the run times here do. Each
row records the commit it was measured at; the file's commit is that of its predictions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from results_file import commit, load1, write_results  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "memory_plan.json"
SMOLLM2_135M = dict(
    vocab_size=49152, num_layers=30, num_heads=9, num_kv_heads=3, embed_dim=576, intermediate_dim=1536
)
CUT_12 = {**SMOLLM2_135M, "num_layers": 12}
SMOLLM2_360M = dict(
    vocab_size=49152, num_layers=32, num_heads=15, num_kv_heads=5, embed_dim=960, intermediate_dim=2560
)
# The process's fixed overhead (torch, the tokenizer, the data): a model too small to count.
TINY = dict(vocab_size=49152, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=128)
STEPS = 3
# The long rows take minutes a step here: 2 steps, the second of which has the optimizer's state.
LONG_STEPS = 2
MAX_SEQ_LEN = 8192  # SmolLM2's config.json

# name -> (recipe, shipped config, world size, model sizes, overrides). $MODEL, $TEACHER, $DATA and
# $PAIRS stand for the folders and file this script writes; the results file keeps them so.
RUNS: dict[str, tuple[str, str, int, dict, list[str]]] = {
    "sft-full-tiny": ("full_finetune_single_device", "smollm2/135M_full", 1, TINY,
                      ["batch_size=2", "tokenizer.max_seq_len=256"]),
    "sft-full-512": ("full_finetune_single_device", "smollm2/135M_full", 1, SMOLLM2_135M,
                     ["batch_size=2", "tokenizer.max_seq_len=512"]),
    "sft-full-256-ac": ("full_finetune_single_device", "smollm2/135M_full", 1, SMOLLM2_135M,
                        ["batch_size=4", "tokenizer.max_seq_len=256", "activation_checkpointing=true"]),
    "sft-full-bf16state-512": ("full_finetune_single_device", "smollm2/135M_full", 1, SMOLLM2_135M,
                               ["batch_size=2", "tokenizer.max_seq_len=512",
                                "optimizer._component_=ftune.training.AdamWBf16State", "~optimizer.fused"]),
    "sft-full-12L-1024": ("full_finetune_single_device", "smollm2/135M_full", 1, CUT_12,
                          ["batch_size=2", "tokenizer.max_seq_len=1024"]),
    "sft-lora-512": ("lora_finetune_single_device", "smollm2/135M_lora", 1, SMOLLM2_135M,
                     ["batch_size=4", "tokenizer.max_seq_len=512"]),
    "sft-lora-1024-ac": ("lora_finetune_single_device", "smollm2/135M_lora", 1, SMOLLM2_135M,
                         ["batch_size=2", "tokenizer.max_seq_len=1024", "activation_checkpointing=true"]),
    "sft-lora-2048": ("lora_finetune_single_device", "smollm2/135M_lora", 1, CUT_12,
                      ["batch_size=1", "tokenizer.max_seq_len=2048"]),
    "dpo-lora-512": ("lora_dpo_single_device", "smollm2/135M_lora_dpo", 1, SMOLLM2_135M,
                     ["batch_size=2", "tokenizer.max_seq_len=512"]),
    "kd-lora-256": ("knowledge_distillation_single_device", "smollm2/360M_to_135M_kd_lora", 1, SMOLLM2_135M,
                    ["batch_size=4", "tokenizer.max_seq_len=256"]),
    "grpo-lora-g4": ("lora_grpo_single_device", "smollm2/135M_lora_grpo", 1, SMOLLM2_135M,
                     ["batch_size=2", "group_size=4", "max_new_tokens=32", "tokenizer.max_seq_len=64",
                      "dataset.max_prompt_len=64"]),
    "grpo-full-g8": ("full_grpo_single_device", "smollm2/135M_full_grpo", 1, CUT_12,
                     ["batch_size=1", "group_size=8", "max_new_tokens=64", "tokenizer.max_seq_len=64",
                      "dataset.max_prompt_len=64"]),
    "sft-full-512-ws2": ("full_finetune_distributed", "smollm2/135M_full", 2, SMOLLM2_135M,
                         ["batch_size=2", "tokenizer.max_seq_len=512"]),
    "sft-lora-512-ws2": ("lora_finetune_distributed", "smollm2/135M_lora", 2, SMOLLM2_135M,
                         ["batch_size=2", "tokenizer.max_seq_len=512"]),
    "dpo-full-256-ws2": ("full_dpo_distributed", "smollm2/135M_full_dpo", 2, CUT_12,
                         ["batch_size=2", "tokenizer.max_seq_len=256"]),
    # One data-parallel row split two ways by context parallel (packed rows: the sliced mask).
    "sft-full-512-ws2-cp2": ("full_finetune_distributed", "smollm2/135M_full", 2, SMOLLM2_135M,
                             ["batch_size=2", "tokenizer.max_seq_len=512", "context_parallel_dim=2"]),
    # One data-parallel row split three ways by tensor parallel (9 heads, 3 key/value heads).
    "sft-full-512-ws3-tp3": ("full_finetune_distributed", "smollm2/135M_full", 3, SMOLLM2_135M,
                             ["batch_size=2", "tokenizer.max_seq_len=512", "tensor_parallel_dim=3"]),
    # One sequence a step as long as SmolLM2's context allows, as the configs ship them otherwise.
    **{f"sft-{kind}-{n // 1024}k": (f"{kind}_finetune_single_device", f"smollm2/135M_{kind}", 1, SMOLLM2_135M,
                                    ["batch_size=1", f"tokenizer.max_seq_len={n}"])
       for kind in ("full", "lora") for n in (2048, 4096, 8192)},
}  # fmt: skip


def model_overrides(section: str, sizes: dict, folder: str) -> list[str]:
    """Point a config's model (or teacher) at a random-weight checkpoint of `sizes`."""
    tokenizer = "tokenizer" if section == "model" else "teacher_tokenizer"
    checkpointer = "checkpointer" if section == "model" else "teacher_checkpointer"
    return [
        f"{section}=ftune.models.smollm2.smollm2",
        *[f"{section}.{k}={v}" for k, v in sizes.items()],
        f"{section}.max_seq_len={MAX_SEQ_LEN}",
        f"{tokenizer}.path={folder}",
        f"{checkpointer}.checkpoint_dir={folder}",
    ]


def steps_of(name: str) -> int:
    """Steps run `name` takes: the peak comes in the second, after the first made the optimizer's state."""
    return LONG_STEPS if name.endswith("k") else STEPS


def overrides_of(name: str) -> list[str]:
    """Every override of run `name` (with the $MODEL/$TEACHER/$DATA/$PAIRS placeholders)."""
    recipe, config, _, sizes, extra = RUNS[name]
    out = [
        *model_overrides("model", sizes, "$MODEL"),
        "dtype=fp32",
        "device=cpu",
        f"max_steps={steps_of(name)}",
    ]
    out += [
        "save_every_n_steps=null",
        "run_val_every_n_steps=null",
        "progress_bar=false",
        "log_every_n_steps=1",
    ]
    out += ["lr_scheduler.num_warmup_steps=0", "epochs=1"]
    if "dpo" in recipe:
        out += ["dataset.source=$PAIRS", "dataset_val.source=$PAIRS", "dataset_val.split=train"]
    else:
        out += ["dataset.data_dir=$DATA", "dataset_val.data_dir=$DATA"]
    if "grpo" not in recipe and "dpo" not in recipe:
        out += ["dataset.packed=true"]
    if "knowledge_distillation" in recipe:
        out += model_overrides("teacher_model", SMOLLM2_360M, "$TEACHER")
    return [*out, *extra]


def base_folder(home: Path) -> Path:
    """SmolLM2-135M-Instruct converted offline (`ftune convert gguf smollm2`): its tokenizer and config."""
    folder = home / "models" / "SmolLM2-135M-Instruct"
    if not (folder / "config.json").exists():
        env = {**os.environ, "FTUNE_HOME": str(home), "PYTHONPATH": str(REPO)}
        subprocess.run([sys.executable, "-m", "ftune.cli", "convert", "gguf", "smollm2"], env=env, check=True)
    return folder


def write_checkpoint(folder: Path, sizes: dict, base: Path) -> None:
    """A checkpoint of `sizes` with random weights and `base`'s tokenizer (SmolLM2's 49,152 tokens)."""
    import torch
    from safetensors.torch import save_file

    from ftune.models import CONVERTERS
    from ftune.models.smollm2 import smollm2

    if (folder / "model.safetensors").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    ):
        shutil.copy(base / name, folder / name)
    torch.manual_seed(0)
    model = smollm2(**sizes, max_seq_len=MAX_SEQ_LEN)
    hf = CONVERTERS["smollm2"].ftune_to_hf(model.state_dict())
    save_file({k: v.contiguous() for k, v in hf.items()}, str(folder / "model.safetensors"))
    config = json.loads((base / "config.json").read_text())
    config |= {"hidden_size": sizes["embed_dim"], "intermediate_size": sizes["intermediate_dim"],
               "num_hidden_layers": sizes["num_layers"], "num_attention_heads": sizes["num_heads"],
               "num_key_value_heads": sizes["num_kv_heads"],
               "head_dim": sizes["embed_dim"] // sizes["num_heads"]}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def write_pairs(path: Path, n: int = 64) -> None:
    """Preference pairs whose answers are longer than any max_seq_len here (so they are truncated)."""
    rng = random.Random(0)
    words = "the of a date year month day format convert answer question model token".split()
    with path.open("w") as f:
        for _ in range(n):
            prompt = " ".join(rng.choice(words) for _ in range(12))
            chosen, rejected = (" ".join(rng.choice(words) for _ in range(1500)) for _ in range(2))
            f.write(json.dumps({"prompt": prompt, "chosen": chosen, "rejected": rejected}) + "\n")


def substitute(overrides: list[str], places: dict[str, str]) -> list[str]:
    out = []
    for o in overrides:
        for key, value in places.items():
            o = o.replace(key, value)
        out.append(o)
    return out


def measure(name: str, places: dict[str, str], home: Path) -> dict:
    recipe, config, world, _, _ = RUNS[name]
    out = Path(tempfile.mkdtemp(prefix=f"memplan_{name}_"))
    overrides = [*substitute(overrides_of(name), places), f"output_dir={out}"]
    launch = ["--nproc_per_node", str(world)] if world > 1 else []
    cmd = [sys.executable, "-P", "-m", "ftune.cli", "run", *launch, recipe, "--config", config, *overrides]
    env = {**os.environ, "FTUNE_HOME": str(home), "PYTHONPATH": str(REPO)}
    before, t0 = load1(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    try:
        logs = sorted((out / "logs").glob("*.jsonl"))
        if proc.returncode != 0 or not logs:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
            raise SystemExit(f"{name}: {recipe} failed (exit {proc.returncode}):\n{tail}")
        rows = [json.loads(line) for line in logs[-1].read_text().splitlines() if line.strip()]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    peaks = [r["peak_memory_gib"] for r in rows if "peak_memory_gib" in r]
    return {"commit": commit(), "measured_gib": round(max(peaks), 3), "peak_by_step_gib": [round(p, 3) for p in peaks],
            "wall_s": round(wall, 1), "load1_before": before, "load1_after": load1()}  # fmt: skip


def predict(name: str) -> dict:
    """The plan of run `name` (its placeholders left in: the plan reads no file of them)."""
    from ftune.config.loading import load_config
    from ftune.planning import plan_config

    recipe, config, world, _, _ = RUNS[name]
    cfg = load_config(config, [*overrides_of(name), "output_dir=/nonexistent"])
    plan = plan_config(cfg, recipe, world_size=world)
    return {"predicted_gib": round(plan.peak_gib, 3), "terms_gib": plan.terms_gib()}


def row_of(name: str, measured: dict) -> dict:
    recipe, config, world, sizes, _ = RUNS[name]
    row = {"run": name, "recipe": recipe, "config": config, "world_size": world,
           "layers": sizes["num_layers"], "overrides": overrides_of(name), **measured, **predict(name)}  # fmt: skip
    row["error"] = round(row["predicted_gib"] / row["measured_gib"] - 1, 4)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(RUNS), help="these runs (default: all)")
    parser.add_argument("--repredict", action="store_true", help="recompute the results file's predictions")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--note", default="", help="added to the results file's note (how the runs were made)"
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "memory_plan_bench")
    args = parser.parse_args()
    old_file = json.loads(args.results.read_text()) if args.results.exists() else {"rows": []}
    # Each row keeps the commit it was measured at (the file's own commit: its predictions').
    measured = {r["run"]: {"commit": r.get("commit", old_file.get("commit")),
                           **{k: r[k] for k in ("measured_gib", "peak_by_step_gib", "wall_s", "load1_before",
                                                "load1_after")}} for r in old_file["rows"]}  # fmt: skip
    raw = args.work / "measured.json"  # every measurement as it comes (a failed prediction loses none)
    if raw.exists():
        measured |= json.loads(raw.read_text())
    if not args.repredict:
        work = args.work
        places = {"$MODEL": str(work / "model135m"), "$TEACHER": str(work / "teacher360m"),
                  "$DATA": str(work / "data"), "$PAIRS": str(work / "pairs.jsonl")}  # fmt: skip
        base = base_folder(work / "home")
        for name in args.only or RUNS:
            sizes = RUNS[name][3]
            folder = base if sizes is SMOLLM2_135M else work / ("model12l" if sizes is CUT_12 else "tiny")
            write_checkpoint(folder, sizes, base)
            places["$MODEL"] = str(folder)
            if "knowledge_distillation" in RUNS[name][0]:
                write_checkpoint(work / "teacher360m", SMOLLM2_360M, base)
            if not (work / "pairs.jsonl").exists():
                write_pairs(work / "pairs.jsonl")
            measured[name] = measure(name, places, work / "home")
            print(name, measured[name], flush=True)
            raw.write_text(json.dumps(measured, indent=1))
    rows = [row_of(name, measured[name]) for name in RUNS if name in measured]
    for r in rows:
        print(f"{r['run']:24} measured {r['measured_gib']:.2f} GiB  predicted {r['predicted_gib']:.2f}  "
              f"{r['error']:+.1%}")  # fmt: skip
    write_results(args.results, "memory_plan", rows,
                  note=" ".join(["Peak RSS of rank 0 (VmHWM after the last step: of 3, of 2 for the 2k-8k rows) "
                                 "against ftune plan's prediction.", args.note]).strip())  # fmt: skip


if __name__ == "__main__":
    main()
