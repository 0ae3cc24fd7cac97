"""The recipe-level scalars of each training recipe family, declared once: type, default, one line of help.

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
