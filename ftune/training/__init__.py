"""The training loop's primitives: every recipe calls these the same way.

A few names live elsewhere and are re-exported here, so the training recipes read them from one
namespace: device, dtype, seeding and the process group (`ftune.runtime`, shared with inference),
`build_model` (`ftune.checkpointing`, which owns checkpoint -> model), `build_collate` and
`validation_loader` (`ftune.data`), `trainable_params` (`ftune.peft`).
"""

from ftune.checkpointing.model_build import build_model
from ftune.data.collate import build_collate, build_preference_collate
from ftune.data.loader import validation_loader
from ftune.peft.apply import trainable_params
from ftune.runtime.device import default_dtype, get_device, get_dtype
from ftune.runtime.distributed import DistInfo, destroy_distributed, init_distributed
from ftune.runtime.hardware import announce
from ftune.runtime.seed import get_rng_state, seed_everything, set_rng_state
from ftune.settings import FullSettings, KDSettings, LoRASettings, QATLoRASettings, QATSettings
from ftune.training.activation_checkpointing import apply_activation_checkpointing
from ftune.training.activation_offloading import apply_activation_offloading
from ftune.training.batch_loss import Loss, MicroBatch, batch_loss, on_device, per_pair, per_token, token_loss
from ftune.training.cadence import every, every_after, total_steps
from ftune.training.compile import compile_loss, compile_model
from ftune.training.dpo_loss import DPOLoss, PairLogps, PairLosses
from ftune.training.fsdp import is_sharded, shard_model
from ftune.training.kd_loss import KDLoss, distill_loss, teacher_hidden
from ftune.training.loss import ChunkedCrossEntropyLoss, CrossEntropyLoss
from ftune.training.low_precision_optim import AdamWBf16State, optimizer_state_bytes
from ftune.training.memory import peak_memory_gib, reset_peak_memory
from ftune.training.metric_logging import (
    DiskLogger,
    MetricLogger,
    StdoutLogger,
    TensorBoardLogger,
    WandBLogger,
)
from ftune.training.optimizer import build_optimizer
from ftune.training.optimizer_in_backward import OptimizerInBackward
from ftune.training.peft_setup import apply_peft
from ftune.training.preference_step import ReferenceModel, preference_loss
from ftune.training.profiler import Profiler
from ftune.training.progress import ProgressBar
from ftune.training.reporter import Reporter, count_tokens
from ftune.training.resume import model_state, restore, save_checkpoint, snapshot
from ftune.training.schedulers import constant_with_warmup, cosine_with_warmup, linear_with_warmup
from ftune.training.signals import StopOnSignal
from ftune.training.step import NonFiniteError, StepLoss, StepStats, accumulate, validate
from ftune.training.teacher import check_same_vocab, load_teacher
from ftune.training.throughput import Throughput

__all__ = [
    "announce",
    "AdamWBf16State",
    "optimizer_state_bytes",
    "ChunkedCrossEntropyLoss",
    "CrossEntropyLoss",
    "DiskLogger",
    "DPOLoss",
    "FullSettings",
    "KDLoss",
    "KDSettings",
    "LoRASettings",
    "MetricLogger",
    "NonFiniteError",
    "OptimizerInBackward",
    "PairLogps",
    "PairLosses",
    "Loss",
    "MicroBatch",
    "Profiler",
    "ProgressBar",
    "QATLoRASettings",
    "ReferenceModel",
    "QATSettings",
    "Reporter",
    "StdoutLogger",
    "StepLoss",
    "StopOnSignal",
    "StepStats",
    "TensorBoardLogger",
    "Throughput",
    "WandBLogger",
    "accumulate",
    "apply_activation_checkpointing",
    "apply_activation_offloading",
    "apply_peft",
    "batch_loss",
    "preference_loss",
    "build_collate",
    "check_same_vocab",
    "load_teacher",
    "teacher_hidden",
    "distill_loss",
    "build_preference_collate",
    "build_model",
    "build_optimizer",
    "compile_loss",
    "compile_model",
    "constant_with_warmup",
    "cosine_with_warmup",
    "count_tokens",
    "default_dtype",
    "validate",
    "on_device",
    "per_pair",
    "per_token",
    "token_loss",
    "every",
    "every_after",
    "get_device",
    "get_dtype",
    "get_rng_state",
    "linear_with_warmup",
    "peak_memory_gib",
    "reset_peak_memory",
    "restore",
    "save_checkpoint",
    "model_state",
    "shard_model",
    "is_sharded",
    "init_distributed",
    "destroy_distributed",
    "DistInfo",
    "seed_everything",
    "set_rng_state",
    "snapshot",
    "total_steps",
    "trainable_params",
    "validation_loader",
]
