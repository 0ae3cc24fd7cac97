"""Run a user's callable (a reward, a chat template) under a time limit per call.

A reward regex with catastrophic backtracking (``re.match(r"(a+)+$", "a" * 40 + "b")``) or a chat
template with nested loops never returns; `call_with_time_limit` stops it after ``seconds`` and
raises `TimeLimitError` with the caller's message (which names the reward and the completion, or
the template and the conversation).

How: a real-time interval timer (``signal.setitimer(ITIMER_REAL)``) whose SIGALRM handler raises
inside the call. Python checks signals between bytecodes and ``re``'s C matcher checks them while
it backtracks, so both a Python loop and a backtracking regex end at the limit. A thread cannot
stop a call (a C regex holds the GIL), and a process per call costs milliseconds; the timer costs
a few microseconds a call (``python -m ftune.config.time_limit`` measures it). The handler is
installed at the first limited call and kept; outside a limited call it does what the handler it
replaced would do. Limits:

- Only the main thread can take a signal: elsewhere the call runs without a limit, with one warning.
- A C extension that never checks for signals (a long numpy call) ends only when it returns.
- An interval timer set by someone else is left alone (the call runs without a limit, one warning).

Nested limits work: the inner call gets the smaller of its limit and what remains of the outer one.
The exception raised in the call derives from BaseException, so a reward's ``except Exception``
cannot swallow it.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class TimeLimitError(ValueError):
    """A call ran past its time limit and was stopped (one message, no traceback)."""

    user_facing = True


class _Expired(BaseException):
    """Raised by the SIGALRM handler inside the call; caught by the `call_with_time_limit` that set it."""

    def __init__(self, token: object) -> None:
        super().__init__("time limit reached")
        self.token = token


_active: list[tuple[object, float]] = []  # (token, deadline on time.monotonic()), innermost last
_warned: set[str] = set()
_previous: Any = signal.SIG_DFL  # the SIGALRM handler ours replaced


def _on_alarm(signum: int, frame: Any) -> None:
    """Stop the innermost limited call; outside one, do what the handler ours replaced would do."""
    if _active:
        raise _Expired(_active[-1][0])
    if callable(_previous):
        _previous(signum, frame)
    elif _previous == signal.SIG_DFL:  # the default action: end the process
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGALRM)


def _install() -> None:
    """Our SIGALRM handler, installed once and kept (installing it a call costs more than the call)."""
    global _previous
    current = signal.getsignal(signal.SIGALRM)
    if current is not _on_alarm:
        _previous = current
        signal.signal(signal.SIGALRM, _on_alarm)


def check_time_limit(seconds: Any, key: str) -> float | None:
    """`seconds` as a time limit, or None for no limit.

    Raises:
        ValueError: not a finite number > 0 or null, naming `key`.
    """
    if seconds is None:
        return None
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or seconds <= 0
    ):
        raise ValueError(
            f"{key}: must be a finite number of seconds > 0, or null for no limit; got {seconds!r}. "
            f"Set {key}=10 (the default) or {key}=null."
        )
    return float(seconds)


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        log.warning("a time limit is not applied: %s; the call runs until it returns.", reason)


def call_with_time_limit(
    fn: Callable[..., T], *args: Any, seconds: float | None, message: Callable[[], str], **kwargs: Any
) -> T:
    """``fn(*args, **kwargs)``, stopped after `seconds` (None: no limit).

    Args:
        fn: the callable.
        seconds: the limit for this call, or None.
        message: builds the error's text when the limit is reached (what ran, on what, the key that
            sets the limit and the fix).

    Raises:
        TimeLimitError: the call ran `seconds` and was stopped.
    """
    if seconds is None:
        return fn(*args, **kwargs)
    if threading.current_thread() is not threading.main_thread():
        _warn_once("it can be enforced only on the main thread")
        return fn(*args, **kwargs)
    if not _active and signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        _warn_once("another interval timer (SIGALRM) is running")
        return fn(*args, **kwargs)
    now = time.monotonic()
    deadline = now + seconds
    if _active:
        deadline = min(deadline, _active[-1][1])
    token = object()
    _install()
    _active.append((token, deadline))
    signal.setitimer(signal.ITIMER_REAL, max(deadline - now, 1e-6))
    try:
        return fn(*args, **kwargs)
    except _Expired as e:
        if e.token is not token:
            raise  # an outer limit's: its own call reports it
        raise TimeLimitError(message()) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _active.pop()
        if _active:  # re-arm the outer limit with what remains of it
            signal.setitimer(signal.ITIMER_REAL, max(_active[-1][1] - time.monotonic(), 1e-6))


if __name__ == "__main__":  # the cost of a limit per call: python -m ftune.config.time_limit
    import timeit

    n = 20_000
    bare = timeit.timeit(lambda: len("x"), number=n) / n
    limited = timeit.timeit(lambda: call_with_time_limit(len, "x", seconds=10.0, message=str), number=n) / n
    print(f"per call: {bare * 1e6:.2f} us bare, {limited * 1e6:.2f} us with a time limit")
