"""Stop a run cleanly on SIGTERM (SLURM pre-emption, `kill`) or Ctrl-C (SIGINT), within a bounded time.

The first signal asks the run to stop at the next step boundary: the step in flight finishes,
the recipe saves a complete step folder, and the process exits with 128 + the signal number
(143 for SIGTERM, 130 for SIGINT) after one line saying how to resume. The stop is bounded two ways:

- a second SIGTERM or Ctrl-C stops at once, without saving the step in flight;
- a watchdog: if the step and its save have not ended `grace_s` seconds after the first signal (a
  step stuck in a reward, a data read that never returns), the process exits with the same code.

Step folders are written atomically with a completion marker, so a save cut short is never picked
by resume: the last complete step folder is what a resume starts from. Under torchrun every rank
agrees on the stop at the same step (one all-reduce of a flag per step), so every rank saves its
part of the same step, and each rank's watchdog starts when it learns of the stop.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)

_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT (Ctrl-C)"}


class StopOnSignal:
    """Context manager that turns SIGTERM / SIGINT into a stop at the next step boundary.

    Use::

        with training.StopOnSignal(s.stop_grace_s) as stop:
            while step < steps and not stop.stopped:
                for batch in ...:
                    ...  # one step
                    if step == steps or stop.check():
                        break
        save(step)
        stop.exit_if_stopped(step, output_dir)

    Outside the main thread (where Python cannot install handlers) it installs nothing and
    ``check()`` only reports stops requested by other ranks.
    """

    def __init__(self, grace_s: float | None) -> None:
        """Args:
        grace_s: seconds the step in flight and its save may take after the first signal before the
            process exits without them; None: wait for them however long they take.
        """
        self.grace_s = grace_s
        self.signum: int | None = None
        self.stopped = False
        self._previous: dict[int, Any] = {}
        self._watchdog: threading.Timer | None = None

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for signum in _NAMES:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:  # a second signal: stop now, the step in flight unsaved
            print(
                f"ftune: {_NAMES[signum]} received again: stopping now, without saving the step in flight "
                "(the last complete step folder is intact).",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(128 + self.signum)  # not an Exception: no `except Exception` in a step keeps it
        bound = f"; if that takes over {self.grace_s:g} s the run exits without it" if self.grace_s else ""
        print(
            f"ftune: {_NAMES[signum]} received: stopping after this step and saving it{bound} (send it "
            "again, or press Ctrl-C, to stop at once without saving).",
            file=sys.stderr,
            flush=True,
        )
        self._stop(signum)

    def _stop(self, signum: int) -> None:
        """Record the stop and start the watchdog that bounds it."""
        self.signum = signum
        if self.grace_s is not None and self._watchdog is None:
            self._watchdog = threading.Timer(self.grace_s, self._expire)
            self._watchdog.daemon = True
            self._watchdog.start()

    def _expire(self) -> None:
        # A thread: it runs while the main thread is stuck in a step (torch ops and Python loops let it).
        print(
            f"ftune: the step in flight did not end within stop_grace_s={self.grace_s:g} s of the stop "
            "signal: exiting without saving it (the last complete step folder is intact; resume with "
            "checkpointer.resume_from_checkpoint=auto).",
            file=sys.stderr,
            flush=True,
        )
        os._exit(128 + (self.signum or signal.SIGTERM))

    def check(self) -> bool:
        """True when this rank or any other received a stop signal; call it at every step boundary."""
        local = self.signum or 0
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            flag = torch.tensor([local], dtype=torch.int64)
            if dist.get_backend() == "nccl":
                flag = flag.cuda()
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            local = int(flag.item())
        if local and self.signum is None:
            self._stop(local)  # another rank was signalled: stop at the same step
        self.stopped = bool(local)
        return self.stopped

    def exit_if_stopped(self, step: int, output_dir: str) -> None:
        """After the final save: exit with 128 + signal number and say how to resume, if a signal stopped the run."""
        if not self.stopped or self.signum is None:
            return
        name = _NAMES.get(signal.Signals(self.signum), signal.Signals(self.signum).name)
        print(
            f"ftune: stopped by {name} after step {step}; saved {output_dir}/step_{step}. Resume with "
            "the same command plus checkpointer.resume_from_checkpoint=auto.",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(128 + self.signum)
