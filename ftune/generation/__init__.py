"""Sampling and KV-cache generation for ftune decoders."""

from ftune.generation.generate import generate, generate_batch
from ftune.generation.rollout import Rollout, rollout
from ftune.generation.sampling import check_sampling_args, sample
from ftune.settings import GenerateSettings

__all__ = [
    "GenerateSettings",
    "Rollout",
    "check_sampling_args",
    "generate",
    "generate_batch",
    "rollout",
    "sample",
]
