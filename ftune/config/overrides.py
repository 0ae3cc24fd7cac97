"""Command-line overrides: ``key=value``, ``a.b.c=value``, ``key=[a,b]``, ``~key``, component shorthand.

Values are parsed as YAML, so ``lr=1e-4`` is a float, ``x=[1,2]`` a list and ``tag='"0001"'``
(quoted, after the shell has removed its own quotes) stays the string ``"0001"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from ftune.config.errors import ConfigError

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")
_DOTTED_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_PAIRS = {"[": "]", "{": "}"}
# YAML 1.1 reads `1e-4` as a string (it wants `1.0e-4`); on a command line it is a float, at any depth
# (`optimizer={_component_: torch.optim.SGD, lr: 1e-4}`), as in a config file (OmegaConf reads it so).
# A quoted '1e-4' stays a string: resolvers see plain scalars only.
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)$")


class _OverrideLoader(yaml.SafeLoader):
    """PyYAML's safe loader, plus exponent floats without a dot (``1e-4``)."""


_OverrideLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


@dataclass(frozen=True)
class Override:
    """One parsed override: set `key` to `value`, or delete `key` when `delete` is True."""

    key: str
    value: Any = None
    delete: bool = False
    text: str = ""


def _balanced(text: str) -> bool:
    stack: list[str] = []
    quote: str | None = None
    for ch in text:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in _PAIRS:
            stack.append(_PAIRS[ch])
        elif ch in "]}":
            if not stack or stack.pop() != ch:
                return False
    return not stack and quote is None


def parse_override(text: str) -> Override:
    """Parse one ``key=value`` or ``~key`` argument.

    Raises:
        ConfigError: with one line naming the override, when it is malformed.
    """
    if text.startswith("~"):
        key = text[1:]
        if not _KEY.match(key):
            raise ConfigError(
                [f"override {text!r}: '~' must be followed by a dotted key, e.g. ~dataset_val."]
            )
        return Override(key=key, delete=True, text=text)
    if "=" not in text:
        raise ConfigError(
            [f"override {text!r}: expected key=value (or ~key to delete a key); there is no '='."]
        )
    key, raw = text.split("=", 1)
    if not key:
        raise ConfigError([f"override {text!r}: the key before '=' is empty; write e.g. batch_size=4."])
    if not _KEY.match(key):
        raise ConfigError(
            [
                f"override {text!r}: {key!r} is not a dotted key (letters, digits, '_' and '.', e.g. optimizer.lr)."
            ]
        )
    if not _balanced(raw):
        raise ConfigError(
            [
                f"override {text!r}: unbalanced brackets or quotes in the value {raw!r}; close every [, {{ and quote."
            ]
        )
    try:
        value = yaml.load(raw, Loader=_OverrideLoader) if raw.strip() else ""  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        problem = str(e).splitlines()[0]
        raise ConfigError([f"override {text!r}: the value {raw!r} is not valid YAML ({problem})."]) from None
    return Override(key=key, value=value, text=text)


def is_component_path(value: Any) -> bool:
    """True when `value` looks like a dotted import path (``ftune.models.smollm2.smollm2_135m``)."""
    return isinstance(value, str) and bool(_DOTTED_PATH.match(value))
