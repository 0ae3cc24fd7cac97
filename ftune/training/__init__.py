"""The training loop's primitives: every recipe calls these the same way, as ``training.X``.

The modules are grouped by what they are, in four sub-packages; each imports only those before it
(``tests/training/test_training_layout.py``):

- ``features``: how a step runs (activation checkpointing and offloading, compile, FSDP, bf16
  optimizer states, the optimizer in backward);
- ``step``: the step core (micro-batch and token loss, losses, ``StepLoss``, ``accumulate``,
  ``validate``, the optimizer, LR schedules);
- ``methods``: what DPO, knowledge distillation and adapters add to the step;
- ``run``: the run around the steps (cadence, resume, signals, reporting, logging, profiling, plots).

``methods`` and ``run`` never import each other. Every public name is re-exported here: recipes and
configs (``_component_: ftune.training.DiskLogger``) name ``ftune.training.X``, never a sub-package.

A few names live elsewhere and are re-exported here, so the training recipes read them from one
namespace: device, dtype, seeding and the process group (`ftune.runtime`, shared with inference),
`build_model` (`ftune.checkpointing`, which owns checkpoint -> model), `build_collate` and
`validation_loader` (`ftune.data`), `trainable_params` (`ftune.peft`).
"""

from ftune.checkpointing.model_build import build_model
from ftune.data.collate import build_collate, build_preference_collate
from ftune.data.loader import validation_loader
from ftune.data.prompt_batch import PromptBatch, build_prompt_collate
from ftune.peft.apply import trainable_params
from ftune.runtime.device import default_dtype, get_device, get_dtype
from ftune.runtime.distributed import DistInfo, destroy_distributed, init_distributed
from ftune.runtime.hardware import announce
from ftune.runtime.seed import get_rng_state, seed_everything, set_rng_state
from ftune.settings import (
    FullSettings,
    GRPOSettings,
    KDSettings,
    LoRAGRPOSettings,
    LoRASettings,
    QATLoRASettings,
    QATSettings,
)
from ftune.training.features.activation_checkpointing import apply_activation_checkpointing
from ftune.training.features.activation_offloading import apply_activation_offloading
from ftune.training.features.compile import compile_loss, compile_model
from ftune.training.features.fsdp import is_sharded, shard_model
from ftune.training.features.low_precision_optim import AdamWBf16State, optimizer_state_bytes
from ftune.training.features.optimizer_in_backward import OptimizerInBackward
from ftune.training.methods.distill_loss import distill_loss, teacher_hidden
from ftune.training.methods.dpo_loss import DPOLoss, PairLogps, PairLosses
from ftune.training.methods.grpo_loss import GRPOLoss, GRPOLosses, grpo_loss, per_sequence
from ftune.training.methods.grpo_rewards import group_advantages, zero_variance_share
from ftune.training.methods.kd_loss import KDLoss
from ftune.training.methods.peft_setup import apply_peft
from ftune.training.methods.preference_loss import preference_loss
from ftune.training.methods.reference import ReferenceModel
from ftune.training.methods.rollout_batch import (
    RolloutBatch,
    Sampling,
    rollout_batch,
    sample_rollout,
    score_rollout,
)
from ftune.training.methods.rollout_loader import RolloutLoader
from ftune.training.methods.teacher import check_same_vocab, load_teacher
from ftune.training.run.cadence import every, every_after, total_steps
from ftune.training.run.dtype_advice import resolve_dtype
from ftune.training.run.memory import peak_memory_gib, reset_peak_memory
from ftune.training.run.metric_logging import (
    DiskLogger,
    MetricLogger,
    StdoutLogger,
    TensorBoardLogger,
    WandBLogger,
)
from ftune.training.run.profiler import Profiler
from ftune.training.run.progress import ProgressBar
from ftune.training.run.reporter import Reporter, count_tokens
from ftune.training.run.resume import model_state, restore, save_checkpoint, snapshot
from ftune.training.run.signals import StopOnSignal
from ftune.training.run.throughput import Throughput
from ftune.training.step.loss import ChunkedCrossEntropyLoss, CrossEntropyLoss
from ftune.training.step.metric import Loss, Metric
from ftune.training.step.micro_batch import MicroBatch, on_device, per_pair, per_token
from ftune.training.step.optimizer import build_optimizer
from ftune.training.step.schedulers import constant_with_warmup, cosine_with_warmup, linear_with_warmup
from ftune.training.step.step_loss import NonFiniteError, StepLoss, StepStats, accumulate, validate
from ftune.training.step.token_loss import batch_loss, token_loss

__all__ = [
    "announce",
    "AdamWBf16State",
    "optimizer_state_bytes",
    "ChunkedCrossEntropyLoss",
    "CrossEntropyLoss",
    "DiskLogger",
    "DPOLoss",
    "GRPOLoss",
    "GRPOLosses",
    "group_advantages",
    "per_sequence",
    "zero_variance_share",
    "GRPOSettings",
    "LoRAGRPOSettings",
    "PromptBatch",
    "build_prompt_collate",
    "RolloutBatch",
    "RolloutLoader",
    "Sampling",
    "grpo_loss",
    "rollout_batch",
    "sample_rollout",
    "score_rollout",
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
    "Metric",
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
    "resolve_dtype",
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
