"""Render Hugging Face chat templates (Jinja) the way `transformers.apply_chat_template` does.

Same environment as transformers: a sandboxed, immutable Jinja environment with
`trim_blocks` and `lstrip_blocks`, loop controls, `raise_exception`, `strftime_now`, a
`tojson` filter that does not escape HTML, and `{% generation %}` blocks (rendered as their
body). The template sees `messages`, `add_generation_prompt`, `tools`, `documents` and the
special-token strings (`bos_token`, `eos_token`, ...).

A template renders a whole conversation to one string, so which characters belong to which
message is found by rendering prefixes: message i owns the characters between the rendering
of messages[:i] and of messages[:i+1] (each measured as its common prefix with the full
rendering, which tolerates templates that close a conversation differently from a prefix).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ftune.data.messages import Message

logger = logging.getLogger(__name__)


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (marks assistant text in some templates): render the body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys=False
) -> str:
    # Jinja's own tojson escapes <, >, & for HTML; chat templates want the plain JSON.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=16)
def compile_chat_template(source: str, origin: str = "the chat template") -> jinja2.Template:
    """Compile a chat template; ValueError naming `origin` if it is not valid Jinja."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise ValueError(f"{origin} is not valid Jinja: {e.message} (template line {e.lineno}).") from e


def render_chat(
    template: jinja2.Template,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = False,
    special_tokens: Mapping[str, str] | None = None,
    origin: str = "the chat template",
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """Render `messages` (dicts with "role" and "content") to text; `tools` (JSON schemas, as
    transformers' ``apply_chat_template(tools=...)`` gives them) go to the template's ``tools``.

    Raises:
        ValueError: the template rejected the conversation (`raise_exception`) or failed.
    """
    try:
        return template.render(
            messages=[dict(m) for m in messages],
            tools=[dict(t) for t in tools] if tools else None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **dict(special_tokens or {}),
        )
    except jinja2.exceptions.TemplateError as e:
        roles = [m["role"] for m in messages]
        raise ValueError(f"{origin} rejected the conversation with roles {roles}: {e}") from e


def _common_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def render_with_spans(
    template: jinja2.Template,
    messages: Sequence[Message],
    *,
    add_generation_prompt: bool = False,
    special_tokens: Mapping[str, str] | None = None,
    origin: str = "the chat template",
) -> tuple[str, list[int]]:
    """Render a conversation and find each message's characters.

    Returns:
        (text, ends): `text` is the full rendering; message i owns `text[ends[i-1]:ends[i]]`
        (with `ends[-1]` taken as 0). With `add_generation_prompt`, the characters after
        `ends[-1]` are the generation prompt.
    """
    dicts = [{"role": m.role, "content": m.content} for m in messages]
    kwargs = {"special_tokens": special_tokens, "origin": origin}
    text = render_chat(template, dicts, add_generation_prompt=add_generation_prompt, **kwargs)
    ends = []
    for i in range(1, len(dicts)):
        prefix = render_chat(template, dicts[:i], **kwargs)
        end = _common_prefix_len(prefix, text)
        if end != len(prefix):
            logger.debug("%s renders messages[:%d] differently from the full conversation", origin, i)
        ends.append(max(end, ends[-1] if ends else 0))
    if add_generation_prompt:
        whole = render_chat(template, dicts, **kwargs)
        ends.append(max(_common_prefix_len(whole, text), ends[-1] if ends else 0))
    else:
        ends.append(len(text))
    return text, ends
