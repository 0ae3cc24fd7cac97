"""StopOnSignal: the first SIGTERM/SIGINT asks for a stop at the step boundary, a second one stops at
once, and a watchdog ends a stop whose step never finishes (issue 37: a stuck reward hung a run that
had said "stopping after this step")."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ftune.training import StopOnSignal


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_the_first_signal_asks_for_a_stop_at_the_step_boundary(signum, code, capsys):
    previous = signal.getsignal(signum)
    with StopOnSignal(None) as stop:
        assert not stop.check()
        os.kill(os.getpid(), signum)
        assert stop.check() and stop.stopped and stop.signum == signum
        assert "stopping after this step and saving it" in capsys.readouterr().err
    assert signal.getsignal(signum) is previous  # handlers restored on exit
    with pytest.raises(SystemExit) as exit_:
        stop.exit_if_stopped(7, "out")
    assert exit_.value.code == code
    assert "after step 7; saved out/step_7. Resume with" in capsys.readouterr().err


@pytest.mark.parametrize("first, second", [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGTERM)])
def test_a_second_signal_stops_at_once_with_the_first_ones_code(first, second, capsys):
    with StopOnSignal(None) as stop:
        os.kill(os.getpid(), first)
        with pytest.raises(SystemExit) as exit_:
            os.kill(os.getpid(), second)
    assert stop.signum == first and exit_.value.code == 128 + first
    assert "received again: stopping now, without saving the step in flight" in capsys.readouterr().err


# A step that never ends: a busy loop (it holds the interpreter, as a stuck reward or data read would).
STUCK = textwrap.dedent(
    """
    import os, signal, sys, time
    from ftune.training import StopOnSignal
    with StopOnSignal(float(sys.argv[1])) as stop:
        print("ready", flush=True)
        while True:
            pass
    """
)


def test_a_stop_whose_step_never_ends_exits_after_the_grace_period():
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK, "1.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    waited = time.monotonic() - sent
    assert proc.returncode == 143, err
    assert "if that takes over 1.5 s the run exits without it" in err
    assert "did not end within stop_grace_s=1.5 s of the stop signal: exiting without saving it" in err
    assert waited >= 1.5  # not before the step had its grace period


def test_without_a_grace_period_a_second_signal_still_ends_a_stuck_step():
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK.replace("float(sys.argv[1])", "None")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert proc.poll() is None  # the first signal waits for the step (for ever: no grace period)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "received again: stopping now" in err


def test_no_signal_no_exit():
    with StopOnSignal(None) as stop:
        assert not stop.check()
    stop.exit_if_stopped(3, "out")  # returns: nothing stopped the run
