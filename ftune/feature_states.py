"""The cells and rows of the feature matrix: a cell's states, and the features' names.

`ftune.registry` declares each recipe's cells with these; docs/recipes/index.md renders them
(`ftune.registry_docs`). Pure Python, no torch.
"""

from __future__ import annotations

# The states of a (recipe, feature) cell. YES is a promise kept by tests: the feature has a check
# of its effect, run on one device in the default test run, and a mutant that makes the check fail;
# `pytest -m matrix` runs the rest of the proof (every check at world size 2, every mutant:
# tests/recipes/test_mutation.py, test_distributed.py). The other states carry their reason after the prefix:
# NA cannot apply to the recipe; GPU_ONLY has an effect on a GPU only; UNCHECKED runs in the recipe
# (its lines are there) but no check of its effect runs on that recipe, so it is not a promise either.
YES = "yes"
NA = "n/a"
GPU_ONLY = "gpu-only"
UNCHECKED = "not checked"
_PREFIXED = (NA, GPU_ONLY, UNCHECKED)


def na(reason: str) -> str:
    """Mark a feature "not applicable" to a recipe, with the reason (shown in the feature matrix)."""
    return f"{NA}: {reason}"


def gpu_only(reason: str) -> str:
    """Mark a feature that only has an effect on a GPU: the CPU machines the tests run on cannot check it,
    so it is never shown as ✓. The reason is shown in the feature matrix."""
    return f"{GPU_ONLY}: {reason}"


def unchecked(reason: str) -> str:
    """Mark a feature that runs in a recipe but whose effect no test checks on a run of that recipe:
    never shown as ✓, and not "n/a" either (it applies). The reason is shown in the feature matrix."""
    return f"{UNCHECKED}: {reason}"


def state(value: str) -> str:
    """The state of a cell: YES, NA, GPU_ONLY, UNCHECKED, or "" for a feature the recipe does not declare."""
    if value == YES:
        return YES
    for prefix in _PREFIXED:
        if value.startswith(f"{prefix}: "):
            return prefix
    return ""


def reason(value: str) -> str:
    """The reason of an NA, GPU_ONLY or UNCHECKED cell ("" for the others)."""
    return value.split(": ", 1)[1] if state(value) in _PREFIXED else ""


# Feature names: each has a section in docs/glossary.md (a test checks it).
FEATURES: dict[str, str] = {
    "grad_accumulation": "several micro-batches per optimizer step, token-normalised",
    "grad_clipping": "clip the global gradient norm",
    "compile": "torch.compile per decoder layer and of the loss",
    "activation_checkpointing": "recompute each decoder layer's activations in backward",
    "activation_offloading": "keep each decoder layer's saved activations in CPU memory until backward",
    "low_precision_optimizers": "AdamW with bf16, 8-bit or 4-bit optimizer state",
    "optimizer_in_backward": "step each parameter's optimizer inside backward",
    "chunked_loss": "cross-entropy in sequence chunks, never the full fp32 logits",
    "custom_collate": "a collate function chosen in the config",
    "packing": "pack samples into fixed-length rows with a document mask",
    "padding_free": "a batch's samples end to end in one row: no compute on padding",
    "validation": "loss on dataset_val every run_val_every_n_steps",
    "step_checkpointing": "save every save_every_n_steps, prune with keep_last_n_checkpoints",
    "resume": "exact resume: same losses as an uninterrupted run",
    "metric_logging": "stdout, JSONL, TensorBoard, Weights & Biases loggers",
    "profiler": "torch.profiler traces behind a flag",
    "lora": "low-rank adapters, saved in PEFT's format",
    "qlora": "LoRA over an NF4-quantized frozen base",
    "dora": "weight-decomposed LoRA",
    "qat": "quantization-aware training with torchao fake quantization",
    "learned_ranges": "QAT trains its weight scales (torchao range learning); saved, resumed, converted with",
    "fsdp2": "shard parameters, gradients and optimizer state across ranks",
    "cpu_offload": "keep sharded parameters and optimizer state on CPU (FSDP2)",
    "quantization": "post-training quantization or QAT convert with torchao",
    "kv_cache": "KV-cache decoding",
    "chat_template": "the model's own chat template",
    "knowledge_distillation": "(1 - kd_ratio) CE + kd_ratio KL(teacher || student), chunked, frozen teacher",
}
