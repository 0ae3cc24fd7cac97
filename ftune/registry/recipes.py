"""Every recipe: one `Recipe` entry each, and the tables derived from them.

`ftune ls`, the docs' feature matrix (docs/recipes/index.md), the config generator and the tests all
read these entries: every test table of the recipes (skeleton, same tag, features, mutants,
distributed) is derived from them. Adding a recipe is its file, one entry below (with its tags), its
approved diff (`python tests/recipes/test_skeleton.py --approve`) and its docs page
(docs/recipes/<name>.md). An entry's features are unions of the cells of `ftune.registry.cells`.
Pure Python, no torch.
"""

from __future__ import annotations

from ftune.registry.cells import (
    AGENT,
    DIST,
    DIST_CHECK,
    DPO_COMMON,
    DPO_LORA,
    DPO_LORA_DIST,
    DPO_SINGLE,
    EVAL,
    GENERATE,
    GRPO_COMMON,
    GRPO_LORA,
    GRPO_LORA_DIST,
    KD,
    LORA,
    NO_OPT_BWD_DIST,
    NO_QAT,
    NOT_LORA,
    OPT_BWD,
    PPO,
    QAT,
    QAT_LORA,
    QUANTIZE,
    RM_COMMON,
    RM_DIST,
    RM_SINGLE,
    SFT_COMMON,
    SINGLE,
    SPLIT_LORA,
    SPLIT_QAT,
)
from ftune.registry.configs import method_of
from ftune.registry.recipe import Recipe

# The training recipes are this recipe plus lines tagged with what makes each one itself (# [lora],
# # [dist], ...): tests/recipes/test_skeleton.py checks it against tests/recipes/approved/<recipe>.diff.
PARENT = "full_finetune_single_device"

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
        {**SFT_COMMON, **LORA, **DIST, **SPLIT_LORA, **NO_QAT, **NO_OPT_BWD_DIST},
        tags=frozenset({"lora", "dist", "sft"}),
        same_losses_as="lora_finetune_single_device",
    ),
    Recipe(
        "qat_single_device",
        "Quantization-aware full fine-tune (torchao fake quantization) on one device.",
        False,
        "smollm2/135M_qat_full",
        ("qat_full",),
        {**SFT_COMMON, **NOT_LORA, **SINGLE, **QAT, **OPT_BWD},
        tags=frozenset({"qat", "sft"}),
    ),
    Recipe(
        "qat_distributed",
        "Quantization-aware full fine-tune (torchao fake quantization) sharded with FSDP2.",
        True,
        "smollm2/135M_qat_full",
        ("qat_full",),
        {**SFT_COMMON, **NOT_LORA, **DIST, **SPLIT_QAT, **QAT, **NO_OPT_BWD_DIST},
        tags=frozenset({"qat", "dist", "sft"}),
        same_losses_as="full_finetune_single_device",
    ),
    Recipe(
        "qat_lora_finetune_distributed",
        "QAT + LoRA: LoRA adapters over a fake-quantized frozen base (torchao), sharded with FSDP2.",
        True,
        "smollm2/135M_qat_lora",
        ("qat_lora",),
        {**SFT_COMMON, **QAT_LORA, **DIST, **SPLIT_LORA, **NO_OPT_BWD_DIST},
        tags=frozenset({"lora", "qat", "dist", "sft"}),
        same_losses_as="lora_finetune_single_device",
    ),
    Recipe(
        "lora_dpo_single_device",
        "LoRA DPO (sigmoid, IPO, reference-free SimPO or ORPO; KTO on unpaired answers) on one device; the "
        "reference is the same model with its adapters off.",
        False,
        "smollm2/135M_lora_dpo",
        ("lora_dpo", "lora_orpo", "lora_kto"),
        {**DPO_COMMON, **DPO_LORA, **SINGLE, **DPO_SINGLE},
        tags=frozenset({"lora", "dpo", "ref"}),  # preference tuning replaces the supervised # [sft] lines
    ),
    Recipe(
        "lora_dpo_distributed",
        "LoRA DPO sharded with FSDP2 over torchrun processes; the reference is the same sharded model with "
        "its adapters off.",
        True,
        "smollm2/135M_lora_dpo",
        ("lora_dpo", "lora_orpo", "lora_kto"),
        {**DPO_COMMON, **DPO_LORA_DIST, **DIST, **SPLIT_LORA, **NO_OPT_BWD_DIST},
        tags=frozenset({"lora", "dpo", "dist", "ref"}),
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
        tags=frozenset({"full", "dpo", "dist", "ref"}),
    ),
    Recipe(
        "reward_model_single_device",
        "Reward model (a scalar head on the last real token, Bradley-Terry loss with TRL's options) on one "
        "device; full, or LoRA with a peft section. Saves load as transformers' ForSequenceClassification.",
        False,
        "smollm2/135M_demo_lora_rm",
        ("full_rm", "lora_rm"),
        {**RM_COMMON, **SINGLE, **RM_SINGLE},
        tags=frozenset({"rm"}),  # the reward model replaces the supervised # [sft] and # [full] lines
    ),
    Recipe(
        "reward_model_distributed",
        "Reward model sharded with FSDP2 over torchrun processes; full, or LoRA with a peft section.",
        True,
        "smollm2/135M_demo_lora_rm",
        ("full_rm", "lora_rm"),
        {**RM_COMMON, **DIST, **RM_DIST},
        tags=frozenset({"rm", "dist"}),
        same_losses_as="reward_model_single_device",
    ),
    Recipe(
        "lora_grpo_single_device",
        "LoRA GRPO (online RL): G sampled completions per prompt on the KV cache, scored by reward components; "
        "the reference is the same model with its adapters off.",
        False,
        "smollm2/135M_lora_grpo",
        ("lora_grpo",),
        {**GRPO_COMMON, **GRPO_LORA, **SINGLE},
        tags=frozenset({"lora", "grpo", "ref"}),  # online RL replaces the supervised # [sft] lines
    ),
    Recipe(
        "lora_grpo_agent_single_device",
        "LoRA agent GRPO: G multi-turn conversations per record with an environment (tools), grown on the KV "
        "cache; only the model's tokens are trained.",
        False,
        "smollm2/135M_lora_grpo_agent",
        ("lora_grpo_agent",),
        {**GRPO_COMMON, **GRPO_LORA, **SINGLE, **AGENT},
        tags=frozenset(
            {"lora", "grpo", "ref", "agent"}
        ),  # [agent]: the multi-turn rollout in place of GRPO's
    ),
    Recipe(
        "full_grpo_single_device",
        "Full GRPO (online RL) on one device; the reference is a frozen copy of the starting weights.",
        False,
        "smollm2/135M_full_grpo",
        ("full_grpo",),
        {**GRPO_COMMON, **NOT_LORA, **SINGLE},
        tags=frozenset({"full", "grpo", "ref"}),
    ),
    Recipe(
        "lora_grpo_distributed",
        "LoRA GRPO sharded with FSDP2 over torchrun processes; each rank samples its share of the prompts.",
        True,
        "smollm2/135M_lora_grpo",
        ("lora_grpo",),
        {**GRPO_COMMON, **GRPO_LORA_DIST, **DIST, **SPLIT_LORA},
        tags=frozenset({"lora", "grpo", "dist", "ref"}),
        same_losses_as="lora_grpo_single_device",
    ),
    Recipe(
        "full_grpo_distributed",
        "Full GRPO sharded with FSDP2 over torchrun processes; the frozen reference is sharded like the policy.",
        True,
        "smollm2/135M_full_grpo",
        ("full_grpo",),
        {**GRPO_COMMON, **NOT_LORA, **DIST},
        tags=frozenset({"full", "grpo", "dist", "ref"}),
        same_losses_as="full_grpo_single_device",
    ),
    Recipe(
        "ppo_full_finetune_single_device",
        "Full PPO (RLHF) on one device: policy, value model, frozen reward model and reference (torchtune's).",
        False,
        "smollm2/135M_ppo",
        ("ppo",),
        {**PPO, **NOT_LORA, **SINGLE},
        tags=frozenset({"ppo", "full", "ref"}),
    ),
    Recipe(
        "generate",
        "Generate text from a prompt or a chat with KV-cache decoding; base, adapter or merged models.",
        False,
        "generation",
        ("generation",),
        GENERATE,
    ),
    Recipe(
        "quantize",
        "Post-training quantization of a checkpoint, or QAT convert, with torchao; saves a native checkpoint.",
        False,
        "quantization",
        ("quantization",),
        QUANTIZE,
    ),
    Recipe(
        "eval",
        "Perplexity (word, byte, bits per byte) on text, exact match on the demo's held-out split, lm-eval tasks.",
        False,
        "eval",
        ("eval",),
        EVAL,
    ),
    Recipe(
        "dist_check",
        "Check a distributed launch: start the process group, all-reduce, report ranks and world size.",
        True,
        "dist_check",
        ("dist_check",),
        DIST_CHECK,
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

# The one order of a combined tag's parts (# [grpo+full+dist], never # [full+grpo]): the method kind,
# then the frozen reference it runs (ref: DPO's and GRPO's), then full or LoRA, then FSDP2.
TAG_ORDER = ("sft", "dpo", "grpo", "ppo", "agent", "kd", "rm", "qat", "ref", "full", "lora", "dist")


def recipe_for_config(config: str) -> Recipe | None:
    """The single-device (first declared) recipe that accepts a config, by its method."""
    method = method_of(config)
    return next((r for r in _RECIPES if method in r.methods), None)
