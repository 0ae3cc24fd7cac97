"""Every recipe, its configs and the features it supports: the one source of truth.

`ftune ls`, the docs' feature matrix (docs/recipes/index.md), the config generator and the tests all
read this file: every test table of the recipes (skeleton, same tag, features, mutants, distributed) is
derived from it. Adding a recipe is its file, one `Recipe` entry below (with its tags), its approved
diff (`python tests/recipes/test_skeleton.py --approve`) and its docs page (docs/recipes/<name>.md).
It imports nothing heavy (no torch), so `ftune ls` starts fast.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from ftune.feature_states import (  # noqa: F401 - re-exported: registry.YES, registry.na(...)
    FEATURES,
    GPU_ONLY,
    NA,
    UNCHECKED,
    YES,
    gpu_only,
    na,
    reason,
    state,
    unchecked,
)
from ftune.registry_cells import (
    DIST,
    DPO_COMMON,
    DPO_UNCHECKED,
    GRPO_COMMON,
    GRPO_UNCHECKED,
    KD,
    LORA,
    NO_OPT_BWD_DIST,
    NO_QAT,
    NOT_LORA,
    OPT_BWD,
    SFT_COMMON,
    SINGLE,
)

# The training recipes are this recipe plus lines tagged with what makes each one itself (# [lora],
# # [dist], ...): tests/recipes/test_skeleton.py checks it against tests/recipes/approved/<recipe>.diff.
PARENT = "full_finetune_single_device"


@dataclass(frozen=True)
class Recipe:
    """One recipe: its file, what it does, how it launches, its configs and its features."""

    name: str
    description: str
    distributed: bool
    default_config: str
    methods: tuple[str, ...]  # config methods it accepts, e.g. ("lora", "qlora", "dora")
    features: dict[str, str] = field(default_factory=dict)
    extra_configs: tuple[str, ...] = ()
    # A training recipe: the tags its lines may use, what makes it differ from PARENT (PARENT's own
    # included). The first recipe declared with a tag defines that tag's lines (`TAGS`). Empty: a
    # recipe not built on PARENT (generate, eval, ...).
    tags: frozenset[str] = frozenset()
    # A distributed training recipe: the one-device recipe whose losses it gives at world size 2 (a
    # QAT recipe: with fake quantization off). None: its own run as a world of one.
    same_losses_as: str | None = None

    @property
    def file(self) -> Path:
        return recipes_dir() / f"{self.name}.py"

    @property
    def configs(self) -> list[str]:
        names = [n for n, m in CONFIGS.items() if m in self.methods]
        return sorted(set(names) | set(self.extra_configs))


_RECIPES = [
    Recipe(
        "full_finetune_single_device",
        "Full fine-tune on one device (CPU, one GPU or MPS).",
        False,
        "smollm2/135M_full",
        ("full",),
        {**SFT_COMMON, **NOT_LORA, **SINGLE, **NO_QAT, **OPT_BWD},
        tags=frozenset({"full", "sft"}),
    ),
    Recipe(
        "lora_finetune_single_device",
        "LoRA, QLoRA or DoRA fine-tune on one device; adapters saved in PEFT's format.",
        False,
        "smollm2/135M_lora",
        ("lora", "qlora", "dora"),
        {**SFT_COMMON, **LORA, **SINGLE, **NO_QAT, **OPT_BWD},
        tags=frozenset({"lora", "sft"}),
    ),
    Recipe(
        "full_finetune_distributed",
        "Full fine-tune sharded with FSDP2 over torchrun processes (gloo on CPU, nccl on GPU).",
        True,
        "smollm2/135M_full",
        ("full",),
        {**SFT_COMMON, **NOT_LORA, **DIST, **NO_QAT, **NO_OPT_BWD_DIST},
        tags=frozenset({"full", "dist", "sft"}),
        same_losses_as="full_finetune_single_device",
    ),
    Recipe(
        "lora_finetune_distributed",
        "LoRA, QLoRA or DoRA fine-tune sharded with FSDP2 over torchrun processes (NF4 bases sharded too).",
        True,
        "smollm2/135M_lora",
        ("lora", "qlora", "dora"),
        {**SFT_COMMON, **LORA, **DIST, **NO_QAT, **NO_OPT_BWD_DIST},
        tags=frozenset({"lora", "dist", "sft"}),
        same_losses_as="lora_finetune_single_device",
    ),
    Recipe(
        "qat_single_device",
        "Quantization-aware full fine-tune (torchao fake quantization) on one device.",
        False,
        "smollm2/135M_qat_full",
        ("qat_full",),
        {**SFT_COMMON, **NOT_LORA, **SINGLE, "qat": YES, "learned_ranges": YES, **OPT_BWD},
        tags=frozenset({"qat", "sft"}),
    ),
    Recipe(
        "qat_distributed",
        "Quantization-aware full fine-tune (torchao fake quantization) sharded with FSDP2.",
        True,
        "smollm2/135M_qat_full",
        ("qat_full",),
        {**SFT_COMMON, **NOT_LORA, **DIST, "qat": YES, "learned_ranges": YES, **NO_OPT_BWD_DIST},
        tags=frozenset({"qat", "dist", "sft"}),
        same_losses_as="full_finetune_single_device",
    ),
    Recipe(
        "qat_lora_finetune_distributed",
        "QAT + LoRA: LoRA adapters over a fake-quantized frozen base (torchao), sharded with FSDP2.",
        True,
        "smollm2/135M_qat_lora",
        ("qat_lora",),
        {
            **SFT_COMMON,
            "lora": YES,
            "qlora": na(
                "the frozen base is fake-quantized for QAT; storing it as NF4 would quantize it twice"
            ),
            "dora": na("QAT + LoRA trains plain LoRA adapters over the fake-quantized base"),
            **DIST,
            "qat": YES,
            "learned_ranges": na(
                "LoRA trains its adapters only, and the adapter checkpoint has no place for ranges: "
                "quantizer.learn_ranges=true is refused with a message"
            ),
            **NO_OPT_BWD_DIST,
        },
        tags=frozenset({"lora", "qat", "dist", "sft"}),
        same_losses_as="lora_finetune_single_device",
    ),
    Recipe(
        "lora_dpo_single_device",
        "LoRA DPO (sigmoid, IPO or reference-free SimPO) on preference pairs on one device; the reference is "
        "the same model with its adapters off.",
        False,
        "smollm2/135M_lora_dpo",
        ("lora_dpo",),
        {
            **DPO_COMMON,
            "lora": YES,
            "qlora": unchecked(DPO_UNCHECKED),
            "dora": unchecked(DPO_UNCHECKED),
            **SINGLE,
            "optimizer_in_backward": unchecked(DPO_UNCHECKED),
        },
        tags=frozenset({"lora", "dpo"}),  # preference tuning replaces the supervised # [sft] lines
    ),
    Recipe(
        "lora_dpo_distributed",
        "LoRA DPO sharded with FSDP2 over torchrun processes; the reference is the same sharded model with "
        "its adapters off.",
        True,
        "smollm2/135M_lora_dpo",
        ("lora_dpo",),
        {
            **DPO_COMMON,
            "lora": YES,
            "qlora": na(
                "QLoRA under FSDP2 is checked in lora_finetune_distributed only, so the launcher refuses it "
                "here; run QLoRA DPO with lora_dpo_single_device"
            ),
            "dora": unchecked(DPO_UNCHECKED),
            **DIST,
            **NO_OPT_BWD_DIST,
        },
        tags=frozenset({"lora", "dpo", "dist"}),
        same_losses_as="lora_dpo_single_device",
    ),
    Recipe(
        "full_dpo_distributed",
        "Full DPO sharded with FSDP2 over torchrun processes; the reference is a frozen copy of the starting "
        "weights, sharded like the policy.",
        True,
        "smollm2/135M_full_dpo",
        ("full_dpo",),
        {**DPO_COMMON, **NOT_LORA, **DIST, **NO_OPT_BWD_DIST},
        tags=frozenset({"full", "dpo", "dist"}),
    ),
    Recipe(
        "lora_grpo_single_device",
        "LoRA GRPO (online RL): G sampled completions per prompt on the KV cache, scored by reward components; "
        "the reference is the same model with its adapters off.",
        False,
        "smollm2/135M_lora_grpo",
        ("lora_grpo",),
        {
            **GRPO_COMMON,
            "lora": YES,
            "qlora": unchecked(GRPO_UNCHECKED),
            "dora": unchecked(GRPO_UNCHECKED),
            **SINGLE,
        },
        tags=frozenset({"lora", "grpo"}),  # online RL replaces the supervised # [sft] lines
    ),
    Recipe(
        "full_grpo_single_device",
        "Full GRPO (online RL) on one device; the reference is a frozen copy of the starting weights.",
        False,
        "smollm2/135M_full_grpo",
        ("full_grpo",),
        {**GRPO_COMMON, **NOT_LORA, **SINGLE},
        tags=frozenset({"full", "grpo"}),
    ),
    Recipe(
        "lora_grpo_distributed",
        "LoRA GRPO sharded with FSDP2 over torchrun processes; each rank samples its share of the prompts.",
        True,
        "smollm2/135M_lora_grpo",
        ("lora_grpo",),
        {
            **GRPO_COMMON,
            "lora": YES,
            "qlora": na(
                "QLoRA under FSDP2 is checked in lora_finetune_distributed only, so the launcher refuses it "
                "here; run QLoRA GRPO with lora_grpo_single_device"
            ),
            "dora": unchecked(GRPO_UNCHECKED),
            **DIST,
        },
        tags=frozenset({"lora", "grpo", "dist"}),
        same_losses_as="lora_grpo_single_device",
    ),
    Recipe(
        "full_grpo_distributed",
        "Full GRPO sharded with FSDP2 over torchrun processes; the frozen reference is sharded like the policy.",
        True,
        "smollm2/135M_full_grpo",
        ("full_grpo",),
        {**GRPO_COMMON, **NOT_LORA, **DIST},
        tags=frozenset({"full", "grpo", "dist"}),
        same_losses_as="full_grpo_single_device",
    ),
    Recipe(
        "generate",
        "Generate text from a prompt or a chat with KV-cache decoding; base, adapter or merged models.",
        False,
        "generation",
        ("generation",),
        {"kv_cache": YES, "chat_template": YES, "lora": YES, "quantization": YES},
    ),
    Recipe(
        "quantize",
        "Post-training quantization of a checkpoint, or QAT convert, with torchao; saves a native checkpoint.",
        False,
        "quantization",
        ("quantization",),
        {"quantization": YES, "qat": YES, "learned_ranges": YES},
    ),
    Recipe(
        "eval",
        "Perplexity (word, byte, bits per byte) on text, exact match on the demo's held-out split, lm-eval tasks.",
        False,
        "eval",
        ("eval",),
        {"kv_cache": YES, "lora": YES, "quantization": YES},
    ),
    Recipe(
        "dist_check",
        "Check a distributed launch: start the process group, all-reduce, report ranks and world size.",
        True,
        "dist_check",
        ("dist_check",),
        {"fsdp2": na("a launch check: it shards nothing")},
    ),
    Recipe(
        "knowledge_distillation_single_device",
        "Distil a frozen teacher into a full or LoRA student on one device (CE + forward KL, chunked).",
        False,
        "smollm2/360M_to_135M_kd",
        ("kd", "kd_lora"),
        {**KD, **SINGLE, **OPT_BWD},
        tags=frozenset({"kd", "sft"}),
    ),
    Recipe(
        "knowledge_distillation_distributed",
        "Knowledge distillation with student and teacher sharded by FSDP2 over torchrun processes.",
        True,
        "smollm2/360M_to_135M_kd",
        ("kd", "kd_lora"),
        {**KD, **DIST, **NO_OPT_BWD_DIST},
        tags=frozenset({"kd", "dist", "sft"}),
        same_losses_as="knowledge_distillation_single_device",
    ),
]
RECIPES: dict[str, Recipe] = {r.name: r for r in _RECIPES}


# The training recipes: PARENT and the recipes built on it (those with tags), in declared order.
TRAINING: dict[str, Recipe] = {r.name: r for r in _RECIPES if r.tags}
# The config methods of the training recipes.
TRAINING_METHODS = tuple(dict.fromkeys(m for r in TRAINING.values() for m in r.methods))


def _tag_references() -> dict[str, str]:
    found: dict[str, str] = {}
    for recipe in TRAINING.values():
        for tag in sorted(recipe.tags):
            found.setdefault(tag, recipe.name)
    return found


# Each tag and the recipe that defines it, the first declared with it: a line tagged # [T] in any
# recipe is a line # [T] has there (tests/recipes/test_same_tag.py). Declare a new kind's one-device
# recipe before its other variants.
TAGS: dict[str, str] = _tag_references()


def method_of_name(stem: str) -> str | None:
    """The method a config file name ends with (``135M_qlora`` -> "qlora", ``eval`` -> "eval"), or None."""
    methods = {m for r in _RECIPES for m in r.methods}
    for method in sorted(methods, key=len, reverse=True):  # qat_full before full
        if stem == method or stem.endswith("_" + method):
            return method
    return None


def _shipped_configs() -> dict[str, str | None]:
    # The YAML files are the one list: scripts/make_configs.py writes the fine-tuning ones, the
    # rest are written by hand. A file whose name ends in no recipe's method maps to None (a test fails).
    root = configs_dir()
    names = sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))
    return {name: method_of_name(Path(name).name) for name in names}


def recipes_dir() -> Path:
    """The folder holding the recipe files: ``recipes/`` in a checkout, ``ftune/_recipes`` when installed."""
    spec = importlib.util.find_spec("ftune._recipes")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(__file__).resolve().parent.parent / "recipes"


def configs_dir() -> Path:
    return recipes_dir() / "configs"


# Every shipped config name (e.g. "smollm2/135M_lora") and its method, read from recipes/configs/.
CONFIGS: dict[str, str | None] = _shipped_configs()


def config_path(name: str) -> Path | None:
    """The YAML file of a shipped config name, or None."""
    if name not in CONFIGS:
        return None
    return configs_dir() / f"{name}.yaml"


def all_config_names() -> list[str]:
    return sorted(CONFIGS)


def method_of(config: str) -> str | None:
    """The method of a config name or file (``smollm2/135M_lora`` or ``my_135M_lora.yaml`` -> "lora")."""
    if config in CONFIGS:
        return CONFIGS[config]
    return method_of_name(Path(config).stem)


def recipe_for_config(config: str) -> Recipe | None:
    """The single-device (first declared) recipe that accepts a config, by its method."""
    method = method_of(config)
    return next((r for r in _RECIPES if method in r.methods), None)
