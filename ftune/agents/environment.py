"""The environment protocol: what a multi-turn rollout talks to, one conversation at a time.

A rollout asks the config's environment to ``start`` a conversation from a dataset record: it gets the
opening messages (system, user) and an :class:`Episode`. The model then takes a turn; the rollout parses
it with the family's tool-call format into a :class:`Turn` and gives it to ``Episode.step``, which
answers with an :class:`EnvStep`: the environment's messages (tool results, a user's reply), a reward
contribution and whether the conversation is over. The environment's messages go into the model's
context but never into the loss; only the model's own tokens are trained.

Messages are the chat template's dicts: ``{"role": ..., "content": ...}``; an assistant message may
carry ``tool_calls`` (``[{"type": "function", "function": {"name": ..., "arguments": {...}}}]``, as
transformers' chat templates read them) and a tool message ``name`` and ``tool_call_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

Message = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: the tool's name, its arguments, and the call's id where the format has one."""

    name: str
    arguments: dict[str, Any]
    id: str | None


@dataclass(frozen=True)
class Turn:
    """The model's turn as the family's tool-call format parsed it.

    Attributes:
        text: the turn's decoded text, without the end-of-turn token.
        content: the text without its tool calls (what a reader sees).
        tool_calls: the calls the text makes, in order (empty: a plain answer).
        error: why a tool call in the text could not be parsed (None: parsed, or no call). An
            environment answers it with a message to the model, never with an exception.
    """

    text: str
    content: str
    tool_calls: tuple[ToolCall, ...]
    error: str | None


@dataclass(frozen=True)
class EnvStep:
    """The environment's answer to one turn.

    Attributes:
        messages: the messages it adds to the conversation (role ``tool`` or ``user``); empty when done.
        reward: this step's reward contribution (the trajectory's environment reward is their sum).
        done: True when the conversation is over (the rollout stops this trajectory).
    """

    messages: list[Message]
    reward: float
    done: bool


@runtime_checkable
class Episode(Protocol):
    """One conversation's state on the environment's side."""

    def step(self, turn: Turn) -> EnvStep: ...


@runtime_checkable
class Environment(Protocol):
    """Starts conversations; ``tools`` are the JSON schemas the chat template's ``tools`` receives."""

    tools: list[dict[str, Any]]

    def start(self, record: Mapping[str, Any]) -> tuple[list[Message], Episode]: ...
