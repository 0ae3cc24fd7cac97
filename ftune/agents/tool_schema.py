"""The JSON schema of a typed Python function, as a chat template's ``tools`` receives it.

The same schema transformers builds (``transformers.utils.get_json_schema``; tests/agents checks
equality on many signatures), so a template renders ftune's tools exactly as it renders the ones a
user passes to ``apply_chat_template``:

- the description is the docstring's text before its ``Args:`` / ``Returns:`` / ``Raises:`` sections;
- each parameter needs a type hint and a line in ``Args:`` (Google style, continuation lines joined);
  ``(choices: [...])`` at the end of a description becomes an ``enum``;
- ``int`` -> integer, ``float`` -> number, ``str`` -> string, ``bool`` -> boolean, ``list[T]`` -> array
  of T, ``tuple[A, B]`` -> array with ``prefixItems``, ``dict`` -> object, ``Literal[...]`` -> enum,
  ``X | None`` -> X with ``nullable``, ``A | B`` -> a list of types, ``Any`` -> no type;
- parameters without a default are ``required``; a return hint gives ``return`` (with the
  ``Returns:`` text as its description).
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any

_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
_SECTION = re.compile(r"^\s*(Args|Arguments|Returns|Raises)\s*:\s*$", re.M)
_ARG = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_CHOICES = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.S)


class SchemaError(ValueError):
    """A function whose JSON schema cannot be built (no docstring line or type hint for an argument...)."""


def _type_schema(hint: Any, where: str) -> dict[str, Any]:
    if hint is Any:
        return {}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        kinds = {_SCALARS.get(type(a)) for a in args}
        out: dict[str, Any] = {"type": kinds.pop()} if len(kinds) == 1 else {}
        return {**out, "enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        parts = [a for a in args if a is not type(None)]
        nullable = len(parts) < len(args)
        if len(parts) == 1:
            out = _type_schema(parts[0], where)
        else:
            subs = [_type_schema(a, where) for a in parts]
            if not all(set(s) == {"type"} and isinstance(s["type"], str) for s in subs):
                raise SchemaError(f"{where}: a union of {hint} cannot be written as a JSON schema type list.")
            out = {"type": [s["type"] for s in subs]}
        return {**out, "nullable": True} if nullable else out
    if hint is list or origin is list:
        return {"type": "array", **({"items": _type_schema(args[0], where)} if args else {})}
    if hint is tuple or origin is tuple:
        if not args or args[-1] is Ellipsis:
            raise SchemaError(
                f"{where}: {hint} has no fixed length; use list[T] for a sequence of any length."
            )
        return {"type": "array", "prefixItems": [_type_schema(a, where) for a in args]}
    if hint is dict or origin is dict:
        return {"type": "object"}
    raise SchemaError(
        f"{where}: type {hint!r} has no JSON schema; use int, float, str, bool, list[...], tuple[...], dict, "
        "Literal[...], X | None or Any."
    )


def _docstring(fn: Callable[..., Any], name: str) -> tuple[str, dict[str, str], str | None]:
    """(description, argument -> description, the Returns text) of a Google-style docstring."""
    doc = inspect.getdoc(fn)
    if not doc:
        raise SchemaError(
            f"tool {name}: it has no docstring; write one saying what it does, with an Args: section."
        )
    sections = list(_SECTION.finditer(doc))
    description = doc[: sections[0].start()].strip() if sections else doc.strip()
    args: dict[str, str] = {}
    returns = None
    for i, sec in enumerate(sections):
        body = doc[sec.end() : sections[i + 1].start() if i + 1 < len(sections) else len(doc)]
        if sec.group(1) in ("Args", "Arguments"):
            current, args_indent = None, 0
            for line in body.splitlines():
                m = _ARG.match(line)
                indent = len(line) - len(line.lstrip())
                if m and (current is None or indent <= args_indent):
                    current, args_indent = m.group(1).lstrip("*"), indent
                    args[current] = m.group(2).strip()
                elif current is not None and line.strip():
                    args[current] = f"{args[current]} {line.strip()}".strip()
        elif sec.group(1) == "Returns":
            returns = " ".join(line.strip() for line in body.splitlines() if line.strip()) or None
    return description, args, returns


def function_schema(fn: Callable[..., Any], name: str | None = None) -> dict[str, Any]:
    """``{"type": "function", "function": {name, description, parameters, [return]}}`` of `fn`.

    Args:
        fn: a function (or a callable object: its ``__call__``) with type hints and a Google-style docstring.
        name: the tool's name (default: the function's ``__name__``).

    Raises:
        SchemaError: a parameter without a type hint or an ``Args:`` line, or a type with no JSON schema.
    """
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else type(fn).__call__
    name = name or getattr(fn, "__name__", None) or type(fn).__name__
    description, arg_docs, returns = _docstring(target, name)  # a tool object: its __call__'s docstring
    try:
        hints = typing.get_type_hints(target)
    except Exception as e:  # noqa: BLE001 - a hint that does not evaluate, named in the message
        raise SchemaError(f"tool {name}: its type hints do not evaluate ({e}).") from None
    properties: dict[str, Any] = {}
    required = []
    for param in inspect.signature(target).parameters.values():
        if param.name == "self":
            continue
        where = f"tool {name}, argument {param.name!r}"
        if param.name not in hints:
            raise SchemaError(f"{where}: it has no type hint; annotate it (e.g. {param.name}: int).")
        if param.name not in arg_docs:
            raise SchemaError(
                f"{where}: the docstring's Args: section does not describe it; add '{param.name}: <what it is>'."
            )
        schema = _type_schema(hints[param.name], where)
        text = arg_docs[param.name]
        if m := _CHOICES.search(text):
            try:
                schema["enum"] = json.loads(m.group(1))
            except json.JSONDecodeError:
                raise SchemaError(
                    f"{where}: (choices: ...) must hold a JSON list, got {m.group(1)!r}."
                ) from None
            text = text[: m.start()].rstrip()
        properties[param.name] = {**schema, "description": text}
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    out: dict[str, Any] = {"name": name, "description": description, "parameters": parameters}
    if "return" in hints:
        out["return"] = _type_schema(hints["return"], f"tool {name}, its return type")
        if returns:
            out["return"]["description"] = returns
    return {"type": "function", "function": out}
