"""The recipe-level scalars of each training recipe family, declared once: type, default, one line of help.

Every key a recipe reads that is not a `_component_` section is a field here, so a misspelt
key is an error (with did-you-mean), never a silent default. One config serves the
single-device and the distributed recipe of its method, so the FSDP keys live in the shared
class and are ignored on one device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ftune.config.positions import max_seq_len_problems
from ftune.config.settings import Settings, setting
from ftune.settings.dist import dist_timeout_problems, parallel_dims_problems


def check_optimizer_in_backward(*, grad_accum_steps: int, clip_grad_norm: float | None) -> None:
    """Raise if a setting is incompatible with stepping the optimizer during backward.

    Here, without torch: the settings classes call it, so a conflict is a config error before
    anything is built (and before torch is imported); ``StepLoss`` checks accumulation again.

    Args:
        grad_accum_steps: micro-batches per optimizer step.
        clip_grad_norm: max gradient norm, or None for no clipping.

    Raises:
        ValueError: if ``grad_accum_steps != 1`` or ``clip_grad_norm`` is set.
    """
    if grad_accum_steps != 1:
        raise ValueError(
            f"optimizer_in_backward needs grad_accum_steps=1, got grad_accum_steps={grad_accum_steps}: each "
            "parameter is updated as soon as its gradient is ready, so gradients cannot accumulate. "
            "Set grad_accum_steps=1 (raise batch_size instead) or optimizer_in_backward=False."
        )
    if clip_grad_norm is not None:
        raise ValueError(
            f"optimizer_in_backward cannot clip gradients (clip_grad_norm={clip_grad_norm}): the total norm "
            "needs every gradient, but each is applied and freed as soon as it is ready. "
            "Set clip_grad_norm=null or optimizer_in_backward=False."
        )


@dataclass
class FullSettings(Settings):
    """Full fine-tuning (full_finetune_single_device, full_finetune_distributed)."""

    COMPONENTS: ClassVar[dict[str, bool]] = {
        "model": False,  # left out: the checkpoint's config.json gives the family and sizes
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
    FROM_CHECKPOINT: ClassVar[dict[str, str]] = {"model": "checkpointer"}

    output_dir: str = setting("output", "folder for step_<N>/ checkpoints and logs")
    seed: int = setting(0, "seed for weights init, data order and dropout")
    device: str = setting("cpu", "cpu, cuda, mps or auto")
    dtype: Literal["fp32", "bf16", "fp16", "auto"] = setting(
        "fp32",
        "parameter and compute dtype; auto: the faster of fp32 and bf16 here that fits (measured, cached)",
    )
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
    dist_timeout_s: float = setting(
        1800.0, "distributed only: seconds a rank waits for the others in a collective before the run fails"
    )
    tensor_parallel_dim: int = setting(
        1,
        "distributed only: ranks that split each layer's projections (a dp x tp mesh, FSDP2 over dp); "
        "1: none. The full-weight distributed recipes (not LoRA, not QAT)",
    )
    context_parallel_dim: int = setting(
        1,
        "distributed only: ranks that split each sequence (a dp x cp mesh, FSDP2 over both); 1: none. "
        "Every distributed training recipe",
    )
    stop_grace_s: float | None = setting(
        600.0,
        "seconds the step in flight and its save may take after a first SIGTERM/Ctrl-C; past them the run "
        "exits without that step (a second signal exits at once); null: wait however long it takes",
    )

    def problems(self) -> list[str]:
        """Counts that make no sense (zero or negative) and settings that cannot work together."""
        out = [
            f"{key}: must be >= 1{' or null' if nullable else ''}, got {value!r}. {fix}"
            for key, value, nullable, fix in (
                ("epochs", self.epochs, False, "Use max_steps to stop inside the first epoch."),
                ("max_steps", self.max_steps, True, "null runs every epoch."),
                ("batch_size", self.batch_size, False, ""),
                ("grad_accum_steps", self.grad_accum_steps, False, "1 means no accumulation."),
                ("save_every_n_steps", self.save_every_n_steps, True, "null saves only at the end."),
                ("run_val_every_n_steps", self.run_val_every_n_steps, True, "null turns validation off."),
                ("max_val_batches", self.max_val_batches, True, "null reads every batch."),
                ("log_every_n_steps", self.log_every_n_steps, False, ""),
            )
            if (value is not None or not nullable) and (value is None or value < 1)
        ]
        out += dist_timeout_problems(self.dist_timeout_s)
        out += parallel_dims_problems(self.tensor_parallel_dim, self.context_parallel_dim)
        if self.stop_grace_s is not None and not (math.isfinite(self.stop_grace_s) and self.stop_grace_s > 0):
            out.append(
                f"stop_grace_s: must be a finite number of seconds > 0 or null (no bound), got "
                f"{self.stop_grace_s!r}. It bounds how long a stop signal waits for the step in flight."
            )
        if not 0 <= self.seed < 2**32:
            out.append(f"seed: must be an int in [0, {2**32 - 1}], got {self.seed!r}. Set e.g. seed=42.")
        if self.clip_grad_norm is not None and not self.clip_grad_norm > 0:
            out.append(f"clip_grad_norm: must be > 0 or null (no clipping), got {self.clip_grad_norm!r}.")
        if self.optimizer_in_backward:
            try:
                check_optimizer_in_backward(
                    grad_accum_steps=self.grad_accum_steps, clip_grad_norm=self.clip_grad_norm
                )
            except ValueError as e:
                out.append(f"optimizer_in_backward: {e}")
        return out

    @classmethod
    def section_problems(cls, data: dict[str, Any]) -> list[str]:
        """A learning rate or a DPO beta that cannot train, and a negative warmup: before anything loads."""
        out = []
        optimizer, loss, scheduler = (data.get(k) if isinstance(data.get(k), dict) else {} for k in _SECTIONS)
        if "lr" in optimizer and _is_number(optimizer["lr"]) and not _finite_positive(optimizer["lr"]):
            out.append(
                f"optimizer.lr: must be a finite number > 0, got {optimizer['lr']!r}: a learning rate of 0 "
                "trains nothing and a negative, infinite or NaN one ruins the weights at the first step. "
                "Typical values: 1e-5 to 5e-5 for a full fine-tune, 1e-4 to 3e-4 for LoRA."
            )
        if str(loss.get("_component_", "")).endswith("DPOLoss"):
            beta, gamma = loss.get("beta"), loss.get("gamma")
            if _is_number(beta) and not _finite_positive(beta):
                out.append(
                    f"loss.beta: must be a finite number > 0, got {beta!r}: it scales every reward (inf or "
                    "NaN makes the loss NaN at the first step). DPO commonly uses 0.1, SimPO about 2.0."
                )
            if _is_number(gamma) and not math.isfinite(gamma):
                out.append(f"loss.gamma: must be a finite number (SimPO's margin, e.g. 0.5), got {gamma!r}.")
        warmup = scheduler.get("num_warmup_steps")
        if _is_number(warmup) and warmup < 0:
            out.append(f"lr_scheduler.num_warmup_steps: must be >= 0 (0: no warmup), got {warmup!r}.")
        return out + _peft_and_tokenizer_problems(data)


_SECTIONS = ("optimizer", "loss", "lr_scheduler")


def _peft_and_tokenizer_problems(data: dict[str, Any]) -> list[str]:
    """LoRA's rank, alpha and dropout and the tokenizer's max_seq_len, which need no model to check."""
    peft = data.get("peft") if isinstance(data.get("peft"), dict) else {}
    tokenizer = data.get("tokenizer") if isinstance(data.get("tokenizer"), dict) else {}
    out = []
    rank, alpha, dropout = peft.get("rank"), peft.get("alpha"), peft.get("dropout")
    if _is_number(rank) and (not isinstance(rank, int) or rank < 1):
        out.append(
            f"peft.rank: must be an int >= 1, got {rank!r}. Typical values: 8 to 64, e.g. peft.rank=8."
        )
    if _is_number(alpha) and not _finite_positive(alpha):
        out.append(
            f"peft.alpha: must be a finite number > 0, got {alpha!r}: the adapters' update is scaled by "
            "alpha / rank. Typical: twice the rank, e.g. peft.alpha=16 with peft.rank=8."
        )
    if _is_number(dropout) and not 0 <= dropout < 1:
        out.append(f"peft.dropout: must be in [0, 1), got {dropout!r}, e.g. peft.dropout=0.05 (0: none).")
    length = tokenizer.get("max_seq_len")
    if _is_number(length) and (not isinstance(length, int) or length < 1):
        out.append(
            f"tokenizer.max_seq_len: must be an int >= 1 or null (no truncation), got {length!r}, "
            "e.g. tokenizer.max_seq_len=2048."
        )
    return out + max_seq_len_problems(data)


def _is_number(value: Any) -> bool:
    """An int or float (not a bool): a value of another type is reported by the signature check."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite_positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


@dataclass
class LoRASettings(FullSettings):
    """LoRA / QLoRA / DoRA fine-tuning: adds the `peft` section (e.g. ftune.peft.apply_lora)."""

    COMPONENTS: ClassVar[dict[str, bool]] = {**FullSettings.COMPONENTS, "peft": True}

    def problems(self) -> list[str]:
        out = super().problems()
        if self.tensor_parallel_dim != 1:
            out.append(
                f"tensor_parallel_dim: {self.tensor_parallel_dim} with LoRA: a LoRA layer computes its frozen "
                "base from the whole weight (merged, NF4 or fake-quantized paths) where tensor parallel's "
                "hooks would see only nn.Linear, and its adapters would need a plan of their own (A whole "
                "beside a column-split base, B split). Set tensor_parallel_dim=1; context_parallel_dim "
                "splits long sequences with LoRA."
            )
        return out


@dataclass
class QATSettings(FullSettings):
    """Quantization-aware fine-tuning: adds the `quantizer` section and the fake-quant delay."""

    COMPONENTS: ClassVar[dict[str, bool]] = {**FullSettings.COMPONENTS, "quantizer": True}

    fake_quant_after_n_steps: int | None = setting(
        None, "keep fake quantization off until this step (null: on from the start)"
    )

    def problems(self) -> list[str]:
        out = super().problems()
        if self.fake_quant_after_n_steps is not None and self.fake_quant_after_n_steps < 0:
            out.append(
                f"fake_quant_after_n_steps: must be >= 0 or null (on from the start), "
                f"got {self.fake_quant_after_n_steps!r}."
            )
        return out


@dataclass
class KDSettings(FullSettings):
    """Knowledge distillation (knowledge_distillation_single_device / _distributed): a frozen teacher
    (its own checkpointer, model and tokenizer sections) and a full student, or a LoRA student when
    the optional `peft` section is present."""

    COMPONENTS: ClassVar[dict[str, bool]] = {
        **FullSettings.COMPONENTS,
        "teacher_checkpointer": True,
        "teacher_model": False,
        "teacher_tokenizer": True,
        "peft": False,
    }

    teacher_adapter_dir: str | None = setting(
        None, "a PEFT adapter folder (a LoRA run's step folder) merged into the teacher (null: none)"
    )


@dataclass
class RewardModelSettings(FullSettings):
    """Reward models (reward_model_single_device / _distributed): the decoder with a scalar score head,
    every weight trained, or LoRA adapters (and the head) when the optional `peft` section is present."""

    COMPONENTS: ClassVar[dict[str, bool]] = {**FullSettings.COMPONENTS, "peft": False}


class QATLoRASettings(QATSettings):
    """QAT + LoRA: LoRA adapters over a fake-quantized frozen base (the `quantizer` and `peft` sections)."""

    COMPONENTS: ClassVar[dict[str, bool]] = {**QATSettings.COMPONENTS, "peft": True}
