"""The training loop's primitives: every recipe calls these the same way."""

from ftune.peft.apply import trainable_params
from ftune.training.activation_checkpointing import apply_activation_checkpointing
from ftune.training.activation_offloading import apply_activation_offloading
from ftune.training.compile import compile_loss, compile_model
from ftune.training.device import default_dtype, get_device, get_dtype
from ftune.training.distributed import DistInfo, destroy_distributed, init_distributed
from ftune.training.fsdp import is_sharded, shard_model
from ftune.training.loop import (
    Reporter,
    build_collate,
    build_optimizer,
    count_tokens,
    every,
    every_after,
    total_steps,
    validation_loader,
)
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
from ftune.training.model_setup import apply_peft, build_model
from ftune.training.optimizer_in_backward import OptimizerInBackward
from ftune.training.profiler import Profiler
from ftune.training.progress import ProgressBar
from ftune.training.resume import model_state, restore, save_checkpoint, snapshot
from ftune.training.schedulers import constant_with_warmup, cosine_with_warmup, linear_with_warmup
from ftune.training.seed import get_rng_state, seed_everything, set_rng_state
from ftune.training.settings import (
    EvalSettings,
    FullSettings,
    GenerateSettings,
    LoRASettings,
    QATSettings,
    QuantizeSettings,
)
from ftune.training.step import NonFiniteError, StepStats, accumulate, eval_loss, train_step
from ftune.training.throughput import Throughput

__all__ = [
    "AdamWBf16State",
    "optimizer_state_bytes",
    "ChunkedCrossEntropyLoss",
    "CrossEntropyLoss",
    "DiskLogger",
    "EvalSettings",
    "FullSettings",
    "GenerateSettings",
    "LoRASettings",
    "MetricLogger",
    "NonFiniteError",
    "OptimizerInBackward",
    "Profiler",
    "ProgressBar",
    "QATSettings",
    "QuantizeSettings",
    "Reporter",
    "StdoutLogger",
    "StepStats",
    "TensorBoardLogger",
    "Throughput",
    "WandBLogger",
    "accumulate",
    "apply_activation_checkpointing",
    "apply_activation_offloading",
    "apply_peft",
    "build_collate",
    "build_model",
    "build_optimizer",
    "compile_loss",
    "compile_model",
    "constant_with_warmup",
    "cosine_with_warmup",
    "count_tokens",
    "default_dtype",
    "eval_loss",
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
    "train_step",
    "trainable_params",
    "validation_loader",
]
