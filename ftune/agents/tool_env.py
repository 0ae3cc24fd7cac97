"""ToolEnvironment: the model calls typed Python functions over several turns, then answers.

A config names the tools by dotted path (trusted like any ``_component_``: ``ftune.config.trust``), or
builds tool objects such as the sandboxed :class:`~ftune.agents.Calculator`::

    environment:
      _component_: ftune.agents.ToolEnvironment
      tools: [my_tools.lookup, {_component_: ftune.agents.Calculator, time_limit_s: 5}]
      prompt_field: question
      max_turns: 4
      max_output_chars: 2000

Each model turn is answered so: a turn without a call ends the conversation (its text is the final
answer, scored by the config's rewards); each call is run and answered with a ``tool`` message (its
result as text, cut at ``max_output_chars`` with the cut said in the message); a call the tool cannot
take (unknown tool, wrong arguments, an exception, past its time limit) is answered with an error
message instead, so the model can try again; a turn whose calls could not be parsed is answered with a
``user`` message saying why (there is no call to attach a result to). After ``max_turns`` model turns
the conversation ends whatever the last turn did. The environment's reward is 0 at every step: the
final answer is scored by the config's rewards.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ftune.agents.environment import EnvStep, Message, ToolCall, Turn
from ftune.agents.tool_schema import SchemaError, function_schema
from ftune.config.errors import ConfigError
from ftune.config.instantiate import resolve
from ftune.config.time_limit import TimeLimitError, call_with_time_limit, check_time_limit
from ftune.config.trust import UntrustedComponentError

TOOL_TIME_LIMIT_S = 10.0  # as a reward's: a tool on one call takes milliseconds unless it is stuck
_JSON_TYPES = {
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _positive_int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be an int >= 1, got {value!r}; set it in the environment's config.")
    return value


def cap_output(text: str, max_chars: int) -> str:
    """`text` cut to `max_chars` characters, the cut announced at the end (the model sees what it missed)."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[output cut: {max_chars} of {len(text)} characters shown]"


def argument_problem(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """Why `arguments` do not fit a tool's JSON schema (names, required, JSON types); None: they do."""
    params = schema["function"]["parameters"]
    props = params.get("properties", {})
    unknown = sorted(set(arguments) - set(props))
    if unknown:
        return f"unknown argument(s) {unknown}; it takes: {', '.join(props) or 'no arguments'}"
    missing = [n for n in params.get("required", []) if n not in arguments]
    if missing:
        return f"missing argument(s) {missing}"
    for name, value in arguments.items():
        spec = props[name]
        kinds = spec.get("type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
        if spec.get("nullable"):
            kinds.append("null")
        if kinds and not any(_JSON_TYPES[k](value) for k in kinds if k in _JSON_TYPES):
            return f"argument {name!r} must be {' or '.join(kinds)}, got {json.dumps(value)}"
        if "enum" in spec and value not in spec["enum"] and value is not None:
            return f"argument {name!r} must be one of {spec['enum']}, got {json.dumps(value)}"
    return None


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)


def _load_tool(tool: Any, key: str) -> tuple[str, Callable[..., Any], dict[str, Any]]:
    """(name, callable, schema) of one configured tool: a dotted path (trust-checked) or a built tool."""
    if isinstance(tool, str):
        try:
            fn = resolve(tool, key)
        except UntrustedComponentError as e:
            raise ConfigError([str(e)]) from None
        except ImportError as e:
            raise ConfigError([f"{key}: cannot import tool {tool!r}: {e}"]) from None
    else:
        fn = tool
    if not callable(fn):
        raise ConfigError(
            [
                f"{key}: {fn!r} is not callable; name a typed function or a tool such as ftune.agents.Calculator."
            ]
        )
    name = getattr(fn, "name", None) or getattr(fn, "__name__", None) or type(fn).__name__
    try:
        schema = function_schema(fn, name)
    except SchemaError as e:
        raise ConfigError([f"{key}: {e}"]) from None
    return name, fn, schema


class ToolEnvironment:
    """An environment whose model calls the configured tools (see the module docstring).

    Args:
        tools: dotted paths of typed functions with Google-style docstrings (their schemas go to the chat
            template's ``tools``), or tool objects (``ftune.agents.Calculator``, ``ftune.agents.PythonTool``).
        prompt_field: the record's field holding the prompt (a string: the user's message; a list of
            role/content messages).
        max_turns: the most model turns a conversation has (>= 1).
        max_output_chars: a tool result longer than this is cut (the message says so).
        system_prompt: a system message put first (None: the prompt's own messages only).
        time_limit_s: seconds a function tool may run per call (default 10; null: no limit); a call past
            it is stopped and answered with an error. Sandboxed tools keep their own limits.

    Raises:
        ConfigError: a tool that is untrusted, does not import, or has no schema (a missing type hint or
            docstring line), or two tools with one name.
        ValueError: a limit that is not a positive int.
    """

    def __init__(
        self,
        tools: Sequence[Any],
        *,
        prompt_field: str,
        max_turns: int,
        max_output_chars: int,
        system_prompt: str | None = None,
        time_limit_s: float | None = TOOL_TIME_LIMIT_S,
    ) -> None:
        if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence) or not tools:
            raise ValueError(f"environment.tools must be a non-empty list of tools, got {tools!r}.")
        self.max_turns = _positive_int(max_turns, "environment.max_turns")
        self.max_output_chars = _positive_int(max_output_chars, "environment.max_output_chars")
        self.time_limit_s = check_time_limit(time_limit_s, "environment.time_limit_s")
        if not isinstance(prompt_field, str) or not prompt_field:
            raise ValueError(
                f"environment.prompt_field must name the record's prompt field, got {prompt_field!r}."
            )
        self.prompt_field, self.system_prompt = prompt_field, system_prompt
        self.functions: dict[str, Callable[..., Any]] = {}
        self.schemas: dict[str, dict[str, Any]] = {}
        for i, tool in enumerate(tools):
            name, fn, schema = _load_tool(tool, f"environment.tools[{i}]")
            if name in self.functions:
                raise ConfigError(
                    [f"environment.tools[{i}]: a second tool named {name!r}; tool names must be unique."]
                )
            self.functions[name], self.schemas[name] = fn, schema
        self.tools = list(self.schemas.values())

    def start(self, record: Mapping[str, Any]) -> tuple[list[Message], ToolEpisode]:
        if self.prompt_field not in record:
            raise KeyError(
                f"environment.prompt_field: the record has no field {self.prompt_field!r} (its fields: "
                f"{sorted(record)}); set prompt_field to the field holding the prompt."
            )
        prompt = record[self.prompt_field]
        messages = (
            [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
        )
        if self.system_prompt is not None:
            messages = [{"role": "system", "content": self.system_prompt}] + [
                m for m in messages if m["role"] != "system"
            ]
        return messages, ToolEpisode(self)

    def run(self, call: ToolCall) -> str:
        """One call's answer for the model: the result (capped) or an error message; never raises."""
        fn = self.functions.get(call.name)
        if fn is None:
            return f"error: there is no tool named {call.name!r}; the tools are: {', '.join(self.functions)}."
        problem = argument_problem(self.schemas[call.name], call.arguments)
        if problem is not None:
            return f"error: {call.name} was not run: {problem}."
        try:
            # a lambda: a tool's own argument may be named `seconds` or `message`
            result = call_with_time_limit(
                lambda: fn(**call.arguments),
                seconds=self.time_limit_s,
                message=lambda: f"{call.name} timed out",
            )
        except TimeLimitError:
            return f"error: {call.name} ran longer than {self.time_limit_s:g} s and was stopped."
        except Exception as e:  # noqa: BLE001 - a tool's failure is the model's to read, not the run's
            return cap_output(f"error: {call.name} raised {type(e).__name__}: {e}", self.max_output_chars)
        return cap_output(_as_text(result), self.max_output_chars)


class ToolEpisode:
    """One conversation of a :class:`ToolEnvironment`: counts the model's turns, runs its calls."""

    def __init__(self, env: ToolEnvironment) -> None:
        self.env, self.turns = env, 0

    def step(self, turn: Turn) -> EnvStep:
        self.turns += 1
        if not turn.tool_calls and turn.error is None:
            return EnvStep(messages=[], reward=0.0, done=True)  # a plain answer: the final one
        if self.turns >= self.env.max_turns:
            return EnvStep(messages=[], reward=0.0, done=True)  # no turn left to read an answer in
        if turn.error is not None:
            return EnvStep(
                messages=[{"role": "user", "content": f"Your tool call could not be read: {turn.error}"}],
                reward=0.0,
                done=False,
            )
        messages: list[Message] = []
        for call in turn.tool_calls:
            message = {"role": "tool", "name": call.name, "content": self.env.run(call)}
            if call.id is not None:
                message["tool_call_id"] = call.id
            messages.append(message)
        return EnvStep(messages=messages, reward=0.0, done=False)
