"""Agents: environments a model talks to over several turns, their tools and tool-call formats (torch-free)."""

from ftune.agents.builtin_tools import Calculator, PythonTool
from ftune.agents.environment import Environment, EnvStep, Episode, Message, ToolCall, Turn
from ftune.agents.tool_env import ToolEnvironment, ToolEpisode
from ftune.agents.verifiers_env import VerifiersEnvironment, VerifiersEpisode

__all__ = [
    "Calculator",
    "EnvStep",
    "Environment",
    "Episode",
    "Message",
    "PythonTool",
    "ToolCall",
    "ToolEnvironment",
    "ToolEpisode",
    "Turn",
    "VerifiersEnvironment",
    "VerifiersEpisode",
]
