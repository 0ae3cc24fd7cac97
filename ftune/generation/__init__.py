"""Sampling and KV-cache generation for ftune decoders."""

from ftune.generation.chat_tokens import ChatTokens, ConversationError
from ftune.generation.generate import generate, generate_batch
from ftune.generation.multi_turn import Trajectories, Trajectory, TurnLimits, multi_turn_rollout
from ftune.generation.rollout import Rollout, rollout
from ftune.generation.sampling import check_sampling_args, sample
from ftune.settings import GenerateSettings

__all__ = [
    "ChatTokens",
    "ConversationError",
    "GenerateSettings",
    "Trajectories",
    "Trajectory",
    "TurnLimits",
    "multi_turn_rollout",
    "Rollout",
    "check_sampling_args",
    "generate",
    "generate_batch",
    "rollout",
    "sample",
]
