"""Every shipped recipe's settings: the typed, documented recipe-level keys, in one torch-free place.

A recipe names its class on its ``SETTINGS = ...`` line (``training.LoRASettings``; the library
packages re-export these names). Nothing here imports torch, so ``ftune run`` and ``ftune validate``
check a config's keys, types and ranges against them before the recipe starts. The machinery
(``Settings``, ``setting``, the checks) is ``ftune.config.settings``.
"""

from ftune.settings.agent import AgentGRPOSettings
from ftune.settings.dist import DistCheckSettings, dist_timeout_problems
from ftune.settings.eval import EvalSettings
from ftune.settings.generate import GenerateSettings
from ftune.settings.grpo import GRPOSettings, LoRAGRPOSettings
from ftune.settings.inference import InferenceModelSettings
from ftune.settings.ppo import PPOSettings
from ftune.settings.quantize import QuantizeSettings
from ftune.settings.training import (
    FullSettings,
    KDSettings,
    LoRASettings,
    QATLoRASettings,
    QATSettings,
    RewardModelSettings,
    check_optimizer_in_backward,
)

__all__ = [
    "AgentGRPOSettings",
    "DistCheckSettings",
    "EvalSettings",
    "FullSettings",
    "GRPOSettings",
    "GenerateSettings",
    "InferenceModelSettings",
    "KDSettings",
    "LoRAGRPOSettings",
    "LoRASettings",
    "PPOSettings",
    "QATLoRASettings",
    "QATSettings",
    "QuantizeSettings",
    "RewardModelSettings",
    "check_optimizer_in_backward",
    "dist_timeout_problems",
]
