"""Tiny Qwen3-MoE, Mixtral and Gemma 2 folders, and the overrides that run their shipped DPO, GRPO and
KD configs on them (tests/recipes/test_methods_on_moe_and_gemma2.py, and at world size 2
tests/recipes/test_methods_on_moe_and_gemma2_distributed.py).

A family's folder is what transformers writes (`make_family_folder`, tests/assets/tiny_hf_family.py:
config.json, model.safetensors, the family's tokenizer files); the configs run with their model
section left out (`~model`: config.json gives the family and sizes) and their data sections pointed
at local files in the configs' own formats (preference pairs, GSM8K-style prompts, Alpaca records)
written from the demo task. A KD config's teacher is a tiny model of the teacher's family (another
seed) on the student's tokenizer files.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "assets"), str(HERE.parent / "models")]

from ftune_tiny_hf import build_tiny_hf  # noqa: E402 - tests/models' helper
from tiny_grpo import GRPO_TINY  # noqa: E402 - tests/assets
from tiny_hf_family import make_family_folder  # noqa: E402
from tiny_preference import write_preference_data  # noqa: E402

FAMILIES = ("qwen3_moe", "mixtral", "gemma2")
MOE = ("qwen3_moe", "mixtral")
METHODS = ("lora_dpo", "full_dpo", "lora_grpo", "full_grpo", "kd")
# The smallest shipped model of each family, and its KD config (scripts/make_configs.py's KD_PAIRS).
SIZE = {"qwen3_moe": "30B-A3B", "mixtral": "8x7B", "gemma2": "2B"}
KD = {
    "qwen3_moe": "qwen3_moe/qwen3_32B_to_30B-A3B_kd",
    "mixtral": "mixtral/mistral_7B_to_8x7B_kd",
    "gemma2": "gemma2/9B_to_2B_kd",
}
TEACHER_FAMILY = {"qwen3_moe": "qwen3", "mixtral": "mistral", "gemma2": "gemma2"}
# One device; the distributed recipes of the same configs (full DPO has only the distributed one,
# which runs in the test's process as a world of one).
SINGLE = {
    "lora_dpo": "lora_dpo_single_device",
    "full_dpo": "full_dpo_distributed",
    "lora_grpo": "lora_grpo_single_device",
    "full_grpo": "full_grpo_single_device",
    "kd": "knowledge_distillation_single_device",
}
DISTRIBUTED = {
    "lora_dpo": "lora_dpo_distributed",
    "full_dpo": "full_dpo_distributed",
    "lora_grpo": "lora_grpo_distributed",
    "full_grpo": "full_grpo_distributed",
    "kd": "knowledge_distillation_distributed",
}
# Large, so that the balancing term is a visible share of the logged loss (the published models: 0.001).
AUX_COEF = 0.5
# Gemma 2's final-logit cap in tests/models/ftune_tiny_hf.py (low, so tanh bends the tiny logits).
GEMMA2_CAP = 3.0
WEIGHTS = ("config.json", "model.safetensors", "generation_config.json")
# The data files of write_data, by the method family that reads them.
DATA_FILES = {"dpo": "preference.jsonl", "grpo": "prompts.jsonl", "kd": "alpaca.jsonl"}


def config_of(family: str, method: str) -> str:
    return KD[family] if method == "kd" else f"{family}/{SIZE[family]}_{method}"


def folders_of(family: str, root: Path) -> tuple[Path, Path]:
    return root / family, root / f"{family}_teacher"


def make_folders(family: str, root: Path) -> tuple[Path, Path]:
    """(student, teacher) folders of `family` under `root` (the teacher: the KD config's teacher family,
    seed 1, the student's tokenizer files)."""
    student, teacher = folders_of(family, root)
    make_family_folder(family, student)
    config = json.loads((student / "config.json").read_text())
    if family in MOE:
        config["router_aux_loss_coef"] = AUX_COEF
        (student / "config.json").write_text(json.dumps(config, indent=2))
    hf = build_tiny_hf(
        TEACHER_FAMILY[family], seed=1, vocab_size=config["vocab_size"], max_position_embeddings=2048
    )
    hf.save_pretrained(teacher)
    for file in student.iterdir():
        if file.name not in WEIGHTS:
            shutil.copy(file, teacher / file.name)
    return student, teacher


def write_data(folder: Path) -> Path:
    """Write `folder`'s DATA_FILES, in the shipped configs' formats: preference pairs (DPO), prompts in a
    column named `question` with an `answer` as in GSM8K (GRPO), Alpaca records (KD). Returns `folder`."""
    from ftune.datasets.demo import generate_demo_examples

    folder.mkdir(parents=True, exist_ok=True)
    examples = generate_demo_examples(32, seed=11)
    prompts, alpaca = folder / DATA_FILES["grpo"], folder / DATA_FILES["kd"]
    prompts.write_text(
        "".join(json.dumps({"question": e.prompt, "answer": e.answer}) + "\n" for e in examples)
    )
    alpaca.write_text(
        "".join(
            json.dumps({"instruction": e.prompt, "input": "", "output": e.answer}) + "\n" for e in examples
        )
    )
    write_preference_data(folder)  # DATA_FILES["dpo"]
    return folder


def overrides(family: str, method: str, root: Path, output_dir: Path) -> list[str]:
    """A shipped config of `family` and `method` on the tiny folders and data under `root`
    (`make_folders(family, root)`, `write_data(root / "data")`): 2 fp32 steps of 2 samples."""
    student, teacher = folders_of(family, root)
    data = {kind: root / "data" / name for kind, name in DATA_FILES.items()}
    out = [
        "~model",
        f"checkpointer.checkpoint_dir={student}",
        f"tokenizer.path={student}",
        "tokenizer.max_seq_len=64",
        f"output_dir={output_dir}",
        "max_steps=2",
        "batch_size=2",
        "dtype=fp32",
        "device=cpu",
        "progress_bar=false",
        "activation_checkpointing=false",
        "save_every_n_steps=null",
        "lr_scheduler.num_warmup_steps=0",
        "optimizer.lr=1e-3",
    ]
    if method.endswith("dpo"):
        out.append(f"dataset.source={data['dpo']}")
    elif method.endswith("grpo"):
        out += [f"dataset.source={data['grpo']}", *GRPO_TINY]
    else:
        out += [
            f"dataset.source={data['kd']}",
            "tokenizer.max_seq_len=160",  # the Alpaca template's preamble is long
            "~teacher_model",
            f"teacher_checkpointer.checkpoint_dir={teacher}",
            f"teacher_tokenizer.path={teacher}",
        ]
    return out
