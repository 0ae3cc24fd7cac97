"""StopOnSignal in-process: the first SIGTERM/SIGINT asks for a stop, a second Ctrl-C stops at once."""

import os
import signal

import pytest

from ftune.training import StopOnSignal


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_the_first_signal_asks_for_a_stop_at_the_step_boundary(signum, code, capsys):
    previous = signal.getsignal(signum)
    with StopOnSignal() as stop:
        assert not stop.check()
        os.kill(os.getpid(), signum)
        assert stop.check() and stop.stopped and stop.signum == signum
        assert "stopping after this step and saving it" in capsys.readouterr().err
    assert signal.getsignal(signum) is previous  # handlers restored on exit
    with pytest.raises(SystemExit) as exit_:
        stop.exit_if_stopped(7, "out")
    assert exit_.value.code == code
    assert "after step 7; saved out/step_7. Resume with" in capsys.readouterr().err


def test_a_second_ctrl_c_raises_keyboard_interrupt():
    with StopOnSignal() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert stop.signum == signal.SIGINT


def test_no_signal_no_exit():
    with StopOnSignal() as stop:
        assert not stop.check()
    stop.exit_if_stopped(3, "out")  # returns: nothing stopped the run
