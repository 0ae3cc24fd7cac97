"""ftune.config.time_limit: a call that never returns (a backtracking regex, a Python loop) is stopped."""

from __future__ import annotations

import logging
import re
import signal
import threading

import pytest

from ftune.config import time_limit
from ftune.config.time_limit import TimeLimitError, call_with_time_limit, check_time_limit

BACKTRACKS = (r"(a+)+$", "a" * 40 + "b")  # 2^40 ways to split the a's: hours without a limit


def _spin() -> None:
    while True:
        pass


def test_a_backtracking_regex_is_stopped_with_the_callers_message():
    with pytest.raises(TimeLimitError, match=r"^the regex on 'aaa"):
        call_with_time_limit(re.match, *BACKTRACKS, seconds=0.2, message=lambda: "the regex on 'aaa...b'")
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # no timer left running


def test_a_python_loop_is_stopped_and_except_exception_does_not_swallow_it():
    def stubborn() -> None:
        try:
            _spin()
        except Exception:  # a reward's own broad except must not catch the stop
            pass
        _spin()

    with pytest.raises(TimeLimitError, match="stubborn"):
        call_with_time_limit(stubborn, seconds=0.2, message=lambda: "stubborn")


def test_a_call_within_its_limit_returns_its_value_and_its_own_errors():
    assert call_with_time_limit(pow, 2, 10, seconds=5.0, message=str) == 1024
    with pytest.raises(KeyError, match="x"):
        call_with_time_limit({}.__getitem__, "x", seconds=5.0, message=str)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_nested_limits_the_inner_one_reports_and_the_outer_one_still_holds():
    def inner_hangs() -> str:
        with pytest.raises(TimeLimitError, match="inner"):
            call_with_time_limit(_spin, seconds=0.1, message=lambda: "inner")
        return "survived"

    assert call_with_time_limit(inner_hangs, seconds=5.0, message=lambda: "outer") == "survived"

    def outer_runs_out() -> None:
        call_with_time_limit(_spin, seconds=60.0, message=lambda: "inner")

    with pytest.raises(TimeLimitError, match="^outer$"):  # the smaller, outer deadline wins
        call_with_time_limit(outer_runs_out, seconds=0.2, message=lambda: "outer")


def test_none_means_no_limit_and_other_threads_run_unbounded_with_one_warning(caplog):
    assert call_with_time_limit(len, "abc", seconds=None, message=str) == 3
    time_limit._warned.clear()
    out = []
    with caplog.at_level(logging.WARNING, logger="ftune.config.time_limit"):
        for _ in range(2):
            t = threading.Thread(
                target=lambda: out.append(call_with_time_limit(len, "ab", seconds=1.0, message=str))
            )
            t.start()
            t.join()
    assert out == [2, 2]
    assert [r.getMessage() for r in caplog.records] == [
        "a time limit is not applied: it can be enforced only on the main thread; the call runs until it returns."
    ]


def test_outside_a_limited_call_sigalrm_does_what_the_previous_handler_did():
    seen = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: seen.append(signum))
    try:
        call_with_time_limit(len, "x", seconds=1.0, message=str)  # installs the handler, keeps it
        signal.raise_signal(signal.SIGALRM)
        assert seen == [signal.SIGALRM]
    finally:
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "10", True])
def test_a_limit_must_be_a_positive_finite_number_or_null(bad):
    with pytest.raises(
        ValueError, match=r"rewards.time_limit_s: must be a finite number of seconds > 0, or null"
    ):
        check_time_limit(bad, "rewards.time_limit_s")
    assert check_time_limit(None, "k") is None and check_time_limit(3, "k") == 3.0
