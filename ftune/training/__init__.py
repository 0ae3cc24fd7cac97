"""The training loop's primitives: every recipe calls these the same way, as ``training.X``.

The modules are grouped by what they are, in four sub-packages; each imports only those before it
(``tests/training/test_training_layout.py``):

- ``features``: how a step runs (activation checkpointing and offloading, compile, FSDP, bf16
  optimizer states, the optimizer in backward);
- ``step``: the step core (micro-batch, the token loss and its count, ``Loss`` and ``Metric``,
  ``StepLoss``, ``accumulate``, ``validate``, the optimizer, LR schedules);
- ``methods``: what DPO, GRPO, knowledge distillation and adapters add to the step;
- ``run``: the run around the steps (cadence, resume, signals, reporting, logging, profiling, plots).

``methods`` and ``run`` never import each other. The namespace holds what recipes call, what configs
name (``_component_: ftune.training.DiskLogger``) and the types a recipe's code meets, in the groups of
``__all__`` below; helpers nothing outside the package reads stay in their modules. Recipes and configs
name ``ftune.training.X``, never a sub-package.

A few names live elsewhere and are re-exported here, so the training recipes read them from one
namespace: device, dtype, seeding and the process group (``ftune.runtime``, shared with inference),
``build_model`` (``ftune.checkpointing``, which owns checkpoint -> model), the collates and
``validation_loader`` (``ftune.data``), ``trainable_params`` (``ftune.peft``), the settings classes
(``ftune.settings``).
"""

from ftune.checkpointing.model_build import build_model
from ftune.data.collate import build_collate, build_preference_collate
from ftune.data.loader import validation_loader
from ftune.data.prompt_batch import PromptBatch, build_prompt_collate
from ftune.modules.score_head import add_score_head
from ftune.peft.apply import trainable_params
from ftune.runtime.device import get_device
from ftune.runtime.distributed import destroy_distributed, init_distributed
from ftune.runtime.mesh import ParallelMesh, device_mesh
from ftune.runtime.seed import get_rng_state, seed_everything, set_rng_state
from ftune.settings import (
    AgentGRPOSettings,
    FullSettings,
    GRPOSettings,
    KDSettings,
    LoRAGRPOSettings,
    LoRASettings,
    PPOSettings,
    QATLoRASettings,
    QATSettings,
    RewardModelSettings,
)
from ftune.training.features.activation_checkpointing import apply_activation_checkpointing
from ftune.training.features.activation_offloading import apply_activation_offloading
from ftune.training.features.compile import compile_loss, compile_model
from ftune.training.features.fsdp import shard_model
from ftune.training.features.low_precision_optim import AdamWBf16State, optimizer_state_bytes
from ftune.training.methods.agent_rollout import (
    Agent,
    TrajectorySampler,
    sample_trajectories,
    score_trajectories,
)
from ftune.training.methods.distill_loss import distill_loss, teacher_hidden
from ftune.training.methods.dpo_loss import DPOLoss, PairLogps
from ftune.training.methods.grpo_loss import GRPOLoss, grpo_loss, per_sequence
from ftune.training.methods.grpo_rewards import group_advantages, zero_variance_share
from ftune.training.methods.kd_loss import KDLoss
from ftune.training.methods.kto_loss import KTOLoss
from ftune.training.methods.off_policy import importance_weights
from ftune.training.methods.off_policy_loader import OffPolicyLoader, Sampled, rollouts_beside_training
from ftune.training.methods.peft_setup import apply_peft
from ftune.training.methods.ppo_loader import PPOLoader
from ftune.training.methods.ppo_loss import PPOLoss, ppo_loss
from ftune.training.methods.ppo_models import build_reward_model, build_value_model
from ftune.training.methods.ppo_rewards import AdaptiveKLController, kl_controller
from ftune.training.methods.ppo_trajectory import Trajectory, ppo_sampling, ppo_trajectory
from ftune.training.methods.preference_loss import preference_loss
from ftune.training.methods.reference import ReferenceModel
from ftune.training.methods.reward_loss import RewardLoss, reward_loss, reward_scores
from ftune.training.methods.rollout_batch import (
    RolloutBatch,
    Sampling,
    rollout_batch,
    sample_rollout,
    score_rollout,
)
from ftune.training.methods.rollout_loader import RolloutLoader
from ftune.training.methods.rollout_worker import ProcessSampler, RolloutSampler
from ftune.training.methods.teacher import check_same_vocab, load_teacher
from ftune.training.run.cadence import every, every_after, total_steps
from ftune.training.run.dtype_advice import resolve_dtype
from ftune.training.run.metric_logging import (
    DiskLogger,
    MetricLogger,
    StdoutLogger,
    TensorBoardLogger,
    WandBLogger,
)
from ftune.training.run.profiler import Profiler
from ftune.training.run.reporter import Reporter, count_tokens
from ftune.training.run.resume import restore, save_checkpoint, save_weights, snapshot
from ftune.training.run.signals import StopOnSignal
from ftune.training.step.loss import ChunkedCrossEntropyLoss, CrossEntropyLoss
from ftune.training.step.metric import Loss, Metric
from ftune.training.step.micro_batch import MicroBatch, on_device, per_pair, per_token
from ftune.training.step.optimizer import build_optimizer
from ftune.training.step.schedulers import constant_with_warmup, cosine_with_warmup, linear_with_warmup
from ftune.training.step.step_loss import NonFiniteError, StepLoss, StepStats, accumulate, validate
from ftune.training.step.token_loss import batch_loss, token_loss

__all__ = [
    # What recipes call: the run around the steps and the step.
    "seed_everything", "get_device", "resolve_dtype", "init_distributed", "destroy_distributed", "device_mesh",
    "build_model", "trainable_params", "apply_peft", "apply_activation_checkpointing",
    "apply_activation_offloading", "compile_model", "compile_loss", "shard_model",
    "build_collate", "validation_loader", "build_optimizer", "total_steps", "restore", "Reporter",
    "count_tokens", "Profiler", "StopOnSignal", "accumulate", "StepLoss", "token_loss", "validate",
    "every", "every_after", "save_checkpoint", "per_token",
    # What recipes call: each method's pieces (DPO, KD, GRPO).
    "ReferenceModel", "build_preference_collate", "preference_loss", "per_pair",
    "load_teacher", "check_same_vocab", "teacher_hidden", "distill_loss",
    "Sampling", "PromptBatch", "build_prompt_collate", "RolloutLoader", "RolloutBatch",
    "sample_rollout", "score_rollout", "rollout_batch", "grpo_loss",
    "add_score_head", "reward_loss", "reward_scores",
    "PPOLoader", "ppo_sampling", "ppo_trajectory", "ppo_loss", "AdaptiveKLController", "kl_controller", "Trajectory",
    "build_value_model", "build_reward_model", "save_weights",
    "Agent", "TrajectorySampler", "sample_trajectories", "score_trajectories", "Sampled",
    "rollouts_beside_training", "OffPolicyLoader", "ProcessSampler", "RolloutSampler", "importance_weights",
    # What configs name as components (_component_: ftune.training.X), and the settings recipes read.
    "CrossEntropyLoss", "ChunkedCrossEntropyLoss", "DPOLoss", "GRPOLoss", "KDLoss", "KTOLoss", "RewardLoss", "PPOLoss",
    "cosine_with_warmup", "linear_with_warmup", "constant_with_warmup", "AdamWBf16State",
    "MetricLogger", "DiskLogger", "StdoutLogger", "TensorBoardLogger", "WandBLogger",
    "FullSettings", "LoRASettings", "QATSettings", "QATLoRASettings", "KDSettings", "GRPOSettings",
    "LoRAGRPOSettings", "AgentGRPOSettings", "RewardModelSettings", "PPOSettings",
    # The types a recipe's code meets, and helpers benchmarks and copies of recipes read.
    "MicroBatch", "ParallelMesh", "Loss", "Metric", "StepStats", "NonFiniteError", "PairLogps", "on_device",
    "batch_loss", "group_advantages", "zero_variance_share", "per_sequence", "optimizer_state_bytes",
    "get_rng_state", "set_rng_state", "snapshot",
]  # fmt: skip
