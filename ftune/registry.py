"""Every recipe, its configs and the features it supports: the one source of truth.

`ftune ls`, the docs' feature matrix (docs/recipes/index.md) and the tests all read this file.
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
    YES,
    gpu_only,
    na,
    reason,
    state,
)

_SFT_COMMON = {
    "grad_accumulation": YES,
    "grad_clipping": YES,
    "compile": YES,
    "activation_checkpointing": YES,
    "activation_offloading": gpu_only(
        "moves saved activations from GPU to CPU memory; a CPU run has nothing to offload to "
        "and refuses it (the test machines have no GPU)"
    ),
    "chunked_loss": YES,
    "low_precision_optimizers": YES,
    "custom_collate": YES,
    "packing": YES,
    "padding_free": YES,
    "validation": YES,
    "step_checkpointing": YES,
    "resume": YES,
    "metric_logging": YES,
    "profiler": YES,
    "knowledge_distillation": na(
        "no teacher: distil with knowledge_distillation_single_device / _distributed"
    ),
}
_NOT_LORA = {
    "lora": na("full fine-tune: every weight trains"),
    "qlora": na("full fine-tune: the base is not frozen"),
    "dora": na("full fine-tune: every weight trains"),
}
_LORA = {"lora": YES, "qlora": YES, "dora": YES}
_SINGLE = {
    "fsdp2": na("one device: nothing to shard"),
    "cpu_offload": na("one device: FSDP2's offload needs the distributed recipe"),
}
_DIST = {
    "fsdp2": YES,
    "cpu_offload": gpu_only(
        "FSDP2's CPU offload moves parameters and optimizer state off the accelerator; on a CPU-only "
        "machine (the test machines) they are on the CPU already and the setting changes nothing"
    ),
}
_NO_QAT = {
    "qat": na("use qat_single_device or qat_distributed"),
    "learned_ranges": na("no QAT: use qat_single_device or qat_distributed"),
}
_OPT_BWD = {"optimizer_in_backward": YES}
# Preference tuning (DPO). What is checked for a DPO run is ✓; the rest says why not.
_DPO_UNCHECKED = (
    "runs in the DPO recipes (the same lines as the SFT recipes), but is not checked on a DPO run: "
    "the DPO runs in the test suite are kept to the features DPO changes or must not break"
)
_DPO_COMMON = {
    "knowledge_distillation": na(
        "preference tuning has no teacher: distil with the knowledge_distillation recipes"
    ),
    "grad_accumulation": YES,
    "grad_clipping": YES,
    "compile": na(f"{_DPO_UNCHECKED} (compile_loss compiles DPOLoss.chunk_loss)"),
    "activation_checkpointing": na(_DPO_UNCHECKED),
    "activation_offloading": gpu_only(
        "moves saved activations from GPU to CPU memory; a CPU run has nothing to offload to "
        "and refuses it (the test machines have no GPU)"
    ),
    "chunked_loss": na(f"{_DPO_UNCHECKED}: DPOLoss projects the labelled tokens in loss.num_chunks blocks"),
    "low_precision_optimizers": na(_DPO_UNCHECKED),
    "custom_collate": na(
        f"{_DPO_UNCHECKED}; a collate_fn must keep padded_collate_preference's layout (chosen rows, then rejected)"
    ),
    "packing": na("preference pairs are scored as whole rows; dataset.packed=true is refused with a message"),
    "padding_free": na(
        "preference pairs are scored as whole rows: chosen rows, then rejected (right-padded)"
    ),
    "validation": YES,  # training.validate over loss_on: the preference loss, rewards, log-prob accuracy
    "step_checkpointing": na(_DPO_UNCHECKED),
    "resume": YES,
    "metric_logging": YES,
    "profiler": na(_DPO_UNCHECKED),
    "qat": na("no QAT preference recipe"),
    "learned_ranges": na("no QAT preference recipe"),
}
_NO_OPT_BWD_DIST = {
    "optimizer_in_backward": na(
        "FSDP2 reduces gradients after backward; stepping inside it would use unreduced grads"
    )
}


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
        {**_SFT_COMMON, **_NOT_LORA, **_SINGLE, **_NO_QAT, **_OPT_BWD},
    ),
    Recipe(
        "lora_finetune_single_device",
        "LoRA, QLoRA or DoRA fine-tune on one device; adapters saved in PEFT's format.",
        False,
        "smollm2/135M_lora",
        ("lora", "qlora", "dora"),
        {**_SFT_COMMON, **_LORA, **_SINGLE, **_NO_QAT, **_OPT_BWD},
    ),
    Recipe(
        "full_finetune_distributed",
        "Full fine-tune sharded with FSDP2 over torchrun processes (gloo on CPU, nccl on GPU).",
        True,
        "smollm2/135M_full",
        ("full",),
        {**_SFT_COMMON, **_NOT_LORA, **_DIST, **_NO_QAT, **_NO_OPT_BWD_DIST},
    ),
    Recipe(
        "lora_finetune_distributed",
        "LoRA or DoRA fine-tune sharded with FSDP2 over torchrun processes.",
        True,
        "smollm2/135M_lora",
        ("lora", "dora"),
        {
            **_SFT_COMMON,
            **_LORA,
            "qlora": na(
                "FSDP2 cannot shard NF4 base weights yet; run QLoRA with lora_finetune_single_device"
            ),
            **_DIST,
            **_NO_QAT,
            **_NO_OPT_BWD_DIST,
        },
    ),
    Recipe(
        "qat_single_device",
        "Quantization-aware full fine-tune (torchao fake quantization) on one device.",
        False,
        "smollm2/135M_qat_full",
        ("qat_full",),
        {**_SFT_COMMON, **_NOT_LORA, **_SINGLE, "qat": YES, "learned_ranges": YES, **_OPT_BWD},
    ),
    Recipe(
        "qat_distributed",
        "Quantization-aware full fine-tune (torchao fake quantization) sharded with FSDP2.",
        True,
        "smollm2/135M_qat_full",
        ("qat_full",),
        {**_SFT_COMMON, **_NOT_LORA, **_DIST, "qat": YES, "learned_ranges": YES, **_NO_OPT_BWD_DIST},
    ),
    Recipe(
        "qat_lora_finetune_distributed",
        "QAT + LoRA: LoRA adapters over a fake-quantized frozen base (torchao), sharded with FSDP2.",
        True,
        "smollm2/135M_qat_lora",
        ("qat_lora",),
        {
            **_SFT_COMMON,
            "lora": YES,
            "qlora": na(
                "the frozen base is fake-quantized for QAT; storing it as NF4 would quantize it twice"
            ),
            "dora": na("QAT + LoRA trains plain LoRA adapters over the fake-quantized base"),
            **_DIST,
            "qat": YES,
            "learned_ranges": na(
                "LoRA trains its adapters only, and the adapter checkpoint has no place for ranges: "
                "quantizer.learn_ranges=true is refused with a message"
            ),
            **_NO_OPT_BWD_DIST,
        },
    ),
    Recipe(
        "lora_dpo_single_device",
        "LoRA DPO (sigmoid, IPO or reference-free SimPO) on preference pairs on one device; the reference is "
        "the same model with its adapters off.",
        False,
        "smollm2/135M_lora_dpo",
        ("lora_dpo",),
        {
            **_DPO_COMMON,
            "lora": YES,
            "qlora": na(_DPO_UNCHECKED),
            "dora": na(_DPO_UNCHECKED),
            **_SINGLE,
            "optimizer_in_backward": na(_DPO_UNCHECKED),
        },
    ),
    Recipe(
        "lora_dpo_distributed",
        "LoRA DPO sharded with FSDP2 over torchrun processes; the reference is the same sharded model with "
        "its adapters off.",
        True,
        "smollm2/135M_lora_dpo",
        ("lora_dpo",),
        {
            **_DPO_COMMON,
            "lora": YES,
            "qlora": na("FSDP2 cannot shard NF4 base weights yet; run QLoRA DPO with lora_dpo_single_device"),
            "dora": na(_DPO_UNCHECKED),
            **_DIST,
            **_NO_OPT_BWD_DIST,
        },
    ),
    Recipe(
        "full_dpo_distributed",
        "Full DPO sharded with FSDP2 over torchrun processes; the reference is a frozen copy of the starting "
        "weights, sharded like the policy.",
        True,
        "smollm2/135M_full_dpo",
        ("full_dpo",),
        {**_DPO_COMMON, **_NOT_LORA, **_DIST, **_NO_OPT_BWD_DIST},
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
]
_KD = {
    **_SFT_COMMON,
    "chunked_loss": na(
        "the loss is KDLoss, which chunks cross-entropy and KL together: checked under knowledge_distillation"
    ),
    "knowledge_distillation": YES,
    "lora": na(
        "a LoRA student is a config choice (the _kd_lora configs: a peft section), tested in "
        "tests/recipes/test_kd.py; this recipe's feature checks run the full-student config"
    ),
    "qlora": na("a LoRA student over an NF4 base is not supported: use a full or LoRA student"),
    "dora": na("the student's adapters are plain LoRA"),
    **_NO_QAT,
}
_RECIPES += [
    Recipe(
        "knowledge_distillation_single_device",
        "Distil a frozen teacher into a full or LoRA student on one device (CE + forward KL, chunked).",
        False,
        "smollm2/360M_to_135M_kd",
        ("kd", "kd_lora"),
        {**_KD, **_SINGLE, **_OPT_BWD},
    ),
    Recipe(
        "knowledge_distillation_distributed",
        "Knowledge distillation with student and teacher sharded by FSDP2 over torchrun processes.",
        True,
        "smollm2/360M_to_135M_kd",
        ("kd", "kd_lora"),
        {**_KD, **_DIST, **_NO_OPT_BWD_DIST},
    ),
]
RECIPES: dict[str, Recipe] = {r.name: r for r in _RECIPES}


# The config methods of the training recipes (those built on recipes/full_finetune_single_device.py).
TRAINING_METHODS = ("full", "lora", "qat_full", "qat_lora", "kd", "lora_dpo", "full_dpo")


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
