"""Tool calls as each family's chat template writes them: parse a model's turn, write a call back.

A model calls a tool by writing text in the layout its chat template renders for an assistant message
with ``tool_calls``; a rollout decodes the model's turn (special tokens kept, the end-of-turn token
dropped) and parses it with the family's format into a :class:`~ftune.agents.Turn`. ``render`` writes
calls the way the template does, so SFT traces and rollouts use the one layout the model was taught.

The formats (``FORMATS``; which family uses which: ``FAMILY_FORMATS``):

- ``llama3_json``: Llama 3.1 / 3.2. One JSON object ``{"name": ..., "parameters": {...}}`` as the whole
  turn, optionally after ``<|python_tag|>`` (the token Meta's prompt format puts before code and calls;
  the chat template itself writes the bare object). The templates render one call a message.
- ``hermes``: Qwen2.5 / Qwen3: each call is ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``
  after the text. Also the documented format of templates that define no tool layout (SmolLM2's ChatML
  template: the same ``<|im_start|>`` layout as Qwen, so the tags sit where Qwen puts them, and they are
  plain text any tokenizer can write).
- ``mistral_v3`` / ``mistral_v3_tekken``: Mistral 7B v0.3, Mixtral 8x22B / Mistral Nemo:
  ``[TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": "<9 letters or digits>"}, ...]`` (the SPM
  templates put a space after ``[TOOL_CALLS]``, the tekken ones do not).
- ``mistral_v11`` / ``mistral_v13``: later Mistral templates, one ``[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}``
  (v11) or ``[TOOL_CALLS]name[ARGS]{...}`` (v13) per call.

A turn whose call cannot be parsed (bad JSON, no name, arguments that are not an object) gives a Turn
with no calls and ``error`` set to a message written for the model; parsing never raises. A turn with
one malformed call runs none of its calls (the model sees why and tries again).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ftune.agents.environment import Message, ToolCall, Turn

_DECODER = json.JSONDecoder()


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _call_from(obj: Any, args_key: str, where: str) -> ToolCall | str:
    """A ToolCall from a decoded JSON object, or the message saying what is wrong with it."""
    if not isinstance(obj, dict):
        return f'{where} is {type(obj).__name__} JSON; write an object such as {{"name": ..., "{args_key}": {{...}}}}.'
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return f'{where} has no "name" string; write {{"name": "<tool>", "{args_key}": {{...}}}}.'
    args = obj.get(args_key, {})
    if isinstance(args, str):  # some models write the arguments as a JSON string; accept it if it is one
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    if not isinstance(args, dict):
        return f'{where}: "{args_key}" of {name!r} must be a JSON object of argument names to values, got {_short(json.dumps(args))}.'
    call_id = obj.get("id")
    return ToolCall(name=name, arguments=args, id=call_id if isinstance(call_id, str) else None)


def _decode(text: str, start: int, where: str) -> tuple[Any, int] | str:
    """The JSON value at text[start:] (after whitespace) and where it ends, or a message for the model."""
    i = start
    while i < len(text) and text[i].isspace():
        i += 1
    try:
        return _DECODER.raw_decode(text, i)
    except json.JSONDecodeError as e:
        return f"{where} is not valid JSON ({e.msg} at character {e.pos - i}): {_short(text[i:])!r}."


def _turn(text: str, content: str, calls: Sequence[ToolCall | str]) -> Turn:
    errors = [c for c in calls if isinstance(c, str)]
    if errors:
        return Turn(text=text, content=content, tool_calls=(), error=" ".join(errors) + " No tool was run.")
    return Turn(text=text, content=content, tool_calls=tuple(calls), error=None)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ToolFormat:
    """How one family writes tool calls. Subclasses define ``parse`` and ``render``."""

    name: str

    def parse(self, text: str) -> Turn:
        """The model's turn (decoded, special tokens kept, no end-of-turn token) as a Turn."""
        raise NotImplementedError

    def render(self, calls: Sequence[ToolCall], content: str = "") -> str:
        """An assistant message's text as the family's chat template renders `content` and `calls`."""
        raise NotImplementedError


def _arguments_json(args: Mapping[str, Any]) -> str:
    # Chat templates render arguments with `tojson` (json.dumps defaults: ", " and ": ", no ASCII escapes).
    return json.dumps(dict(args), ensure_ascii=False)


@dataclass(frozen=True)
class Llama3Json(ToolFormat):
    """Llama 3.1 / 3.2: ``{"name": ..., "parameters": {...}}``, optionally after ``<|python_tag|>``."""

    tag: str = "<|python_tag|>"

    def parse(self, text: str) -> Turn:
        body = text.strip()
        tagged = body.startswith(self.tag)
        if tagged:
            body = body[len(self.tag) :].lstrip()
        elif not re.match(r'\{\s*"name"', body):
            return Turn(text=text, content=text, tool_calls=(), error=None)  # a plain answer
        calls: list[ToolCall | str] = []
        pos = 0
        while pos < len(body):  # several objects separated by ";" or newlines (Llama 3.2's zero-shot prompt)
            decoded = _decode(body, pos, f"tool call {len(calls) + 1}")
            if isinstance(decoded, str):
                return _turn(text, "", [decoded])
            obj, pos = decoded
            args_key = "parameters" if isinstance(obj, dict) and "parameters" in obj else "arguments"
            calls.append(_call_from(obj, args_key, f"tool call {len(calls) + 1}"))
            pos = len(body) - len(body[pos:].lstrip(" \n;"))
        if not calls:
            return _turn(
                text,
                "",
                [
                    f'{self.tag} is followed by no call; write {self.tag}{{"name": ..., "parameters": {{...}}}}.'
                ],
            )
        return _turn(text, "", calls)

    def render(self, calls: Sequence[ToolCall], content: str = "") -> str:
        # The template renders only the first call and drops the content of a message with calls.
        if len(calls) != 1:
            raise ValueError(
                f"{self.name}: Llama 3.1/3.2 templates render exactly one tool call a message, got {len(calls)}."
            )
        call = calls[0]
        return f'{{"name": "{call.name}", "parameters": {_arguments_json(call.arguments)}}}'


_HERMES = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.S)


@dataclass(frozen=True)
class Hermes(ToolFormat):
    """Qwen2.5 / Qwen3 (and SmolLM2 by choice): ``<tool_call>\\n{json}\\n</tool_call>`` after the text."""

    def parse(self, text: str) -> Turn:
        first = text.find("<tool_call>")
        if first < 0:
            return Turn(text=text, content=text, tool_calls=(), error=None)
        calls: list[ToolCall | str] = []
        for m in _HERMES.finditer(text, first):
            where = f"tool call {len(calls) + 1}"
            if not m.group(2):
                calls.append(f"{where} has no closing </tool_call>.")
                break
            decoded = _decode(m.group(1), 0, where)
            if isinstance(decoded, str):
                calls.append(decoded)
            elif m.group(1)[decoded[1] :].strip():
                calls.append(
                    f"{where} has text after its JSON object: {_short(m.group(1)[decoded[1] :].strip())!r}."
                )
            else:
                calls.append(_call_from(decoded[0], "arguments", where))
        return _turn(text, text[:first].rstrip("\n"), calls)

    def render(self, calls: Sequence[ToolCall], content: str = "") -> str:
        parts = [content] if content else []
        parts += [
            f'<tool_call>\n{{"name": "{c.name}", "arguments": {_arguments_json(c.arguments)}}}\n</tool_call>'
            for c in calls
        ]
        return "\n".join(parts)


_MISTRAL_ID = re.compile(r"[A-Za-z0-9]{9}")


@dataclass(frozen=True)
class MistralList(ToolFormat):
    """Mistral v3: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": "abcdefghi"}, ...]``."""

    space: bool = True  # SPM templates write "[TOOL_CALLS] [", tekken ones "[TOOL_CALLS]["

    def parse(self, text: str) -> Turn:
        head, sep, rest = text.partition("[TOOL_CALLS]")
        if not sep:
            return Turn(text=text, content=text, tool_calls=(), error=None)
        decoded = _decode(rest, 0, "the [TOOL_CALLS] list")
        if isinstance(decoded, str):
            return _turn(text, head.strip(), [decoded])
        objs, _ = decoded
        if not isinstance(objs, list) or not objs:
            return _turn(
                text,
                head.strip(),
                [
                    '[TOOL_CALLS] must be followed by a non-empty JSON list: [{"name": ..., "arguments": {...}}].'
                ],
            )
        return _turn(
            text, head.strip(), [_call_from(o, "arguments", f"tool call {i + 1}") for i, o in enumerate(objs)]
        )

    def render(self, calls: Sequence[ToolCall], content: str = "") -> str:
        bad = [c.id for c in calls if not (isinstance(c.id, str) and _MISTRAL_ID.fullmatch(c.id))]
        if bad:
            raise ValueError(
                f"{self.name}: Mistral templates need call ids of 9 letters or digits, got {bad}."
            )
        items = [
            f'{{"name": "{c.name}", "arguments": {_arguments_json(c.arguments)}, "id": "{c.id}"}}'
            for c in calls
        ]
        return "[TOOL_CALLS]" + (" " if self.space else "") + "[" + ", ".join(items) + "]"


@dataclass(frozen=True)
class MistralArgs(ToolFormat):
    """Mistral v11 / v13: ``[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}`` (v11) or ``[TOOL_CALLS]name[ARGS]{...}``."""

    call_id: bool = False

    def parse(self, text: str) -> Turn:
        head, sep, _ = text.partition("[TOOL_CALLS]")
        if not sep:
            return Turn(text=text, content=text, tool_calls=(), error=None)
        calls: list[ToolCall | str] = []
        for i, chunk in enumerate(text.split("[TOOL_CALLS]")[1:]):
            where = f"tool call {i + 1}"
            name, sep, args_text = chunk.partition("[ARGS]")
            call_id = None
            if self.call_id and "[CALL_ID]" in name:
                name, _, call_id = name.partition("[CALL_ID]")
            if not sep or not name.strip():
                calls.append(f"{where} must read [TOOL_CALLS]<name>[ARGS]{{...}}, got {_short(chunk)!r}.")
                continue
            decoded = _decode(args_text, 0, f"{where}'s [ARGS]")
            if isinstance(decoded, str):
                calls.append(decoded)
                continue
            obj = {"name": name.strip(), "arguments": decoded[0], "id": call_id}
            calls.append(_call_from(obj, "arguments", where))
        return _turn(text, head.strip(), calls)

    def render(self, calls: Sequence[ToolCall], content: str = "") -> str:
        def one(c: ToolCall) -> str:
            ident = f"[CALL_ID]{c.id}" if self.call_id else ""
            return f"[TOOL_CALLS]{c.name}{ident}[ARGS]{_arguments_json(c.arguments)}"

        return content + "".join(one(c) for c in calls)


def assistant_message(turn: Turn) -> Message:
    """The model's turn as the assistant message a chat template renders (``tool_calls`` as transformers'
    templates read them: ``{"type": "function", "id": ..., "function": {"name": ..., "arguments": {...}}}``).
    A turn whose calls could not be parsed keeps its whole text as content (what the model wrote)."""
    if turn.error is not None or not turn.tool_calls:
        return {"role": "assistant", "content": turn.text if turn.error is not None else turn.content}
    calls = []
    for c in turn.tool_calls:
        call: dict[str, Any] = {
            "type": "function",
            "function": {"name": c.name, "arguments": dict(c.arguments)},
        }
        if c.id is not None:
            call["id"] = c.id
        calls.append(call)
    return {"role": "assistant", "content": turn.content, "tool_calls": calls}


FORMATS: dict[str, ToolFormat] = {
    f.name: f
    for f in (
        Llama3Json("llama3_json"),
        Hermes("hermes"),
        MistralList("mistral_v3", space=True),
        MistralList("mistral_v3_tekken", space=False),
        MistralArgs("mistral_v11", call_id=True),
        MistralArgs("mistral_v13", call_id=False),
    )
}

# The format each family's chat template uses (ftune.models.FAMILIES names; tests/agents checks them).
# Families whose templates define no tool layout and that are not listed here need `tool_format:` set.
FAMILY_FORMATS: dict[str, str] = {
    "llama3_1": "llama3_json",
    "llama3_2": "llama3_json",
    "qwen2": "hermes",
    "qwen2_5": "hermes",
    "qwen3": "hermes",
    "qwen3_moe": "hermes",
    "smollm2": "hermes",  # no tool layout in its template: ChatML like Qwen's, so Qwen's tags
    "mistral": "mistral_v3",
    "mixtral": "mistral_v3",
}


def tool_format(family: str | None, override: str | None = None, key: str = "tool_format") -> ToolFormat:
    """The tool-call format of a model family, or the one `override` names.

    Args:
        family: the model's family (``ftune.models.FAMILIES``), None when unknown.
        override: a name of ``FORMATS`` that wins over the family's (the config's `key`).
        key: the config key `override` comes from, for the message.

    Raises:
        ValueError: `override` names no format, or the family has none and no override is given.
    """
    names = ", ".join(sorted(FORMATS))
    if override is not None:
        if override not in FORMATS:
            raise ValueError(f"{key}: {override!r} is not a tool-call format; set it to one of: {names}.")
        return FORMATS[override]
    if family in FAMILY_FORMATS:
        return FORMATS[FAMILY_FORMATS[family]]
    listed = ", ".join(f"{k} ({v})" for k, v in FAMILY_FORMATS.items())
    raise ValueError(
        f"{key}: model family {family!r} has no known tool-call format (families that have one: {listed}). "
        f"Set {key} to one of: {names} (hermes writes <tool_call>{{json}}</tool_call>, a layout any tokenizer can "
        "write; the model must be taught it, e.g. by SFT on traces)."
    )
