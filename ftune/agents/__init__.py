"""Agents: environments a model talks to over several turns, their tools and tool-call formats (torch-free)."""

from ftune.agents.builtin_tools import Calculator, PythonTool
from ftune.agents.environment import Environment, EnvStep, Episode, Message, ToolCall, Turn
from ftune.agents.textarena_env import TextArenaEnvironment, TextArenaEpisode
from ftune.agents.tool_env import ToolEnvironment, ToolEpisode
from ftune.agents.tool_formats import FAMILY_FORMATS, FORMATS, ToolFormat, assistant_message, tool_format
from ftune.agents.verifiers_env import VerifiersEnvironment, VerifiersEpisode

__all__ = [
    "FAMILY_FORMATS",
    "FORMATS",
    "Calculator",
    "EnvStep",
    "Environment",
    "Episode",
    "Message",
    "PythonTool",
    "TextArenaEnvironment",
    "TextArenaEpisode",
    "ToolCall",
    "ToolEnvironment",
    "ToolEpisode",
    "ToolFormat",
    "Turn",
    "VerifiersEnvironment",
    "VerifiersEpisode",
    "assistant_message",
    "tool_format",
]
