"""The recipe-level scalars of each recipe family, declared once: type, default, one line of help.

Every key a recipe reads that is not a `_component_` section is a field here, so a misspelt
key is an error (with did-you-mean), never a silent default. One config serves the
single-device and the distributed recipe of its method, so the FSDP keys live in the shared
class and are ignored on one device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from ftune.config.settings import Settings, setting


@dataclass
class FullSettings(Settings):
    """Full fine-tuning (full_finetune_single_device, full_finetune_distributed)."""

    COMPONENTS: ClassVar[dict[str, bool]] = {
        "model": True,
        "tokenizer": True,
        "checkpointer": True,
        "dataset": True,
        "optimizer": True,
        "loss": True,
        "lr_scheduler": False,
        "dataset_val": False,
        "collate_fn": False,
        "metric_logger": False,
    }
    RUNTIME: ClassVar[dict[str, tuple[str, ...]]] = {"lr_scheduler": ("num_training_steps",)}

    output_dir: str = setting("output", "folder for step_<N>/ checkpoints and logs")
    seed: int = setting(0, "seed for weights init, data order and dropout")
    device: str = setting("cpu", "cpu, cuda, mps or auto")
    dtype: Literal["fp32", "bf16", "fp16"] = setting("fp32", "parameter and compute dtype")
    epochs: int = setting(1, "passes over the dataset (max_steps stops earlier)")
    max_steps: int | None = setting(None, "stop after this many optimizer steps (null: run all epochs)")
    batch_size: int = setting(4, "samples per micro-batch (per rank when distributed)")
    grad_accum_steps: int = setting(1, "micro-batches per optimizer step (token-normalised)")
    clip_grad_norm: float | None = setting(None, "clip the global gradient norm to this value (null: off)")
    shuffle: bool = setting(True, "shuffle the dataset each epoch (seeded by seed and epoch)")
    compile: bool = setting(False, "torch.compile each decoder layer and the loss")
    activation_checkpointing: bool = setting(False, "recompute decoder-layer activations in backward")
    activation_offloading: bool = setting(
        False, "keep decoder-layer saved activations in CPU memory until backward (CUDA only)"
    )
    optimizer_in_backward: bool = setting(
        False, "step the optimizer inside backward (needs grad_accum_steps=1)"
    )
    save_every_n_steps: int | None = setting(
        None, "save a step checkpoint this often (the end is always saved)"
    )
    run_val_every_n_steps: int | None = setting(None, "validation loss on dataset_val this often (null: off)")
    max_val_batches: int | None = setting(None, "cap on validation batches per evaluation (null: all)")
    log_every_n_steps: int = setting(1, "log metrics this often")
    progress_bar: bool = setting(True, "show a tqdm bar with loss, lr, tokens/s and peak memory")
    profile: bool = setting(False, "record a torch.profiler trace of the first steps into output_dir/profile")
    fsdp_reshard_after_forward: bool = setting(True, "distributed only: free gathered params after forward")
    fsdp_cpu_offload: bool = setting(
        False, "distributed only: keep sharded params and optimizer state on CPU"
    )


@dataclass
class LoRASettings(FullSettings):
    """LoRA / QLoRA / DoRA fine-tuning: adds the `peft` section (e.g. ftune.peft.apply_lora)."""

    COMPONENTS: ClassVar[dict[str, bool]] = {**FullSettings.COMPONENTS, "peft": True}


@dataclass
class QATSettings(FullSettings):
    """Quantization-aware fine-tuning: adds the `quantizer` section and the fake-quant delay."""

    COMPONENTS: ClassVar[dict[str, bool]] = {**FullSettings.COMPONENTS, "quantizer": True}

    fake_quant_after_n_steps: int | None = setting(
        None, "keep fake quantization off until this step (null: on from the start)"
    )


_MODEL = "model"  # optional in generate/quantize/eval: the architecture is read from config.json without it


@dataclass
class GenerateSettings(Settings):
    """The generate recipe: one prompt (or system + prompt) through the chat template, streamed."""

    COMPONENTS: ClassVar[dict[str, bool]] = {"checkpointer": True, "tokenizer": True, _MODEL: False}

    prompt: str | None = setting(None, "the user message (or the raw text with chat=false); required")
    system: str | None = setting(None, "a system message before the prompt (chat only)")
    chat: bool = setting(True, "wrap the prompt in the model's chat template (false: raw text completion)")
    adapter_dir: str | None = setting(None, "a LoRA/DoRA step folder (PEFT format) merged into the model")
    quantized_checkpoint: str | None = setting(
        None, "the quantize recipe's output folder (used instead of the checkpointer)"
    )
    max_new_tokens: int = setting(256, "tokens to generate at most")
    temperature: float = setting(0.0, "sampling temperature; 0 is greedy")
    top_k: int | None = setting(None, "sample among the k most likely tokens (null: all)")
    top_p: float | None = setting(None, "sample within this nucleus probability (null: off)")
    seed: int = setting(0, "sampling seed")
    device: str = setting("cpu", "cpu, cuda, mps or auto")
    dtype: Literal["fp32", "bf16", "fp16"] = setting(
        "fp32", "compute dtype (a quantized checkpoint keeps its own)"
    )


@dataclass
class QuantizeSettings(Settings):
    """The quantize recipe (PTQ, or QAT convert)."""

    COMPONENTS: ClassVar[dict[str, bool]] = {"checkpointer": True, "quantizer": True, _MODEL: False}

    output_dir: str = setting("output/quantized", "folder for the native quantized checkpoint")
    qat: bool = setting(False, "the checkpoint was trained with QAT: prepare then convert (else PTQ)")
    adapter_dir: str | None = setting(None, "a LoRA/DoRA step folder merged into the model before quantizing")
    device: str = setting("cpu", "cpu, cuda, mps or auto")
    dtype: Literal["fp32", "bf16", "fp16"] = setting("fp32", "dtype of the float weights before quantizing")


@dataclass
class EvalSettings(Settings):
    """The eval recipe: perplexity on text files, exact match on held-out chat records."""

    COMPONENTS: ClassVar[dict[str, bool]] = {"checkpointer": True, "tokenizer": True, _MODEL: False}

    text_files: list[str] = setting([], "text files for perplexity, one document each")
    heldout_file: str | None = setting(
        None, "JSONL of chat records for exact match (the demo's heldout.jsonl); null: skip"
    )
    demo_data_if_missing: bool = setting(
        True, "when heldout_file is a missing heldout.jsonl, write the demo data (as training does) first"
    )
    adapter_dir: str | None = setting(None, "a LoRA/DoRA step folder (PEFT format) merged into the model")
    quantized_checkpoint: str | None = setting(
        None, "the quantize recipe's output folder (used instead of the checkpointer)"
    )
    max_seq_len: int = setting(512, "perplexity: rolling-window length in tokens")
    stride: int | None = setting(
        None, "perplexity: new tokens per window after the first (null: max_seq_len)"
    )
    max_new_tokens: int | None = setting(
        None, "exact match: tokens generated per prompt (null: the longest reference's tokens + 4)"
    )
    batch_size: int = setting(32, "prompts generated together, and perplexity windows per forward")
    limit: int | None = setting(None, "evaluate at most this many held-out records (null: all)")
    show_examples: int = setting(3, "print this many held-out predictions next to their references")
    output_file: str | None = setting(None, "also write the results as JSON here")
    device: str = setting("cpu", "cpu, cuda, mps or auto")
    dtype: Literal["fp32", "bf16", "fp16"] = setting(
        "fp32", "compute dtype (a quantized checkpoint keeps its own)"
    )


@dataclass
class DistCheckSettings(Settings):
    """The dist_check recipe."""

    backend: str | None = setting(None, "process-group backend (null: gloo on CPU, nccl on CUDA)")
    fail_rank: int | None = setting(
        None, "make this rank exit with an error (to test how launch failures surface)"
    )
