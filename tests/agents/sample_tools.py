"""Typed tool functions of the agents tests (a module beside the tests: trusted only when a test trusts it)."""

from __future__ import annotations

import time
from typing import Any, Literal, Optional, Union


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.

    Returns:
        Their sum.
    """
    return a + b


def describe(
    text: str,
    scale: float,
    loud: bool,
    tags: list[str],
    limit: Optional[int] = None,  # noqa: UP045 - typing's spelling, as transformers reads it too
    mode: Literal["short", "long"] = "short",
    extra: dict = None,
    either: Union[int, str] = 1,  # noqa: UP007
    short: float | None = None,
    pair: tuple[int, str] = (1, "a"),
    anything: Any = None,
    maybe: list[Optional[str]] = None,  # noqa: UP045
    unit: str = "cm",
):
    """Describe a text.

    A second paragraph of the description.

    Args:
        text: the text
            to describe, on two lines.
        scale: a factor.
        loud: shout or not.
        tags: labels.
        limit: at most this many characters.
        mode: how long.
        extra: more settings.
        either: a number or a word.
        short: a number or nothing.
        pair: a number and a word.
        anything: whatever.
        maybe: labels or nothing.
        unit: the unit (choices: ["cm", "in"])

    Raises:
        ValueError: never.
    """
    return f"{text}:{mode}"


def no_args() -> str:
    """Say hello."""
    return "hello"


def loud(n: int) -> str:
    """Print a lot.

    Args:
        n: how many characters.
    """
    return "x" * n


def fails(x: int) -> int:
    """Raise.

    Args:
        x: anything.
    """
    raise RuntimeError(f"boom {x}")


def sleeps(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long.
    """
    time.sleep(seconds)
    return "awake"


def untyped(x) -> str:
    """No hint.

    Args:
        x: an x.
    """
    return str(x)
