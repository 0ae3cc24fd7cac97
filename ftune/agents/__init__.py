"""Agents: environments a model talks to over several turns, their tools and tool-call formats (torch-free)."""

from ftune.agents.environment import Environment, EnvStep, Episode, Message, ToolCall, Turn
from ftune.agents.tool_env import ToolEnvironment, ToolEpisode

__all__ = [
    "EnvStep",
    "Environment",
    "Episode",
    "Message",
    "ToolCall",
    "ToolEnvironment",
    "ToolEpisode",
    "Turn",
]
