"""Stop a run cleanly on SIGTERM (SLURM pre-emption, `kill`) or Ctrl-C (SIGINT).

The first signal asks the run to stop at the next step boundary: the step in flight finishes,
the recipe saves a complete step folder, and the process exits with 128 + the signal number
(143 for SIGTERM, 130 for SIGINT) after one line saying how to resume. A second Ctrl-C stops at
once (KeyboardInterrupt): step folders are written atomically with a completion marker, so a
save cut short is never picked by resume. Under torchrun every rank agrees on the stop at the
same step (one all-reduce of a flag per step), so every rank saves its part of the same step.
"""

from __future__ import annotations

import logging
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

        with training.StopOnSignal() as stop:
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

    def __init__(self) -> None:
        self.signum: int | None = None
        self.stopped = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for signum in _NAMES:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now
        if self.signum is None:
            self.signum = signum
            print(
                f"ftune: {_NAMES[signum]} received: stopping after this step and saving it "
                "(press Ctrl-C again to stop at once, without saving).",
                file=sys.stderr,
                flush=True,
            )

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
            self.signum = local  # another rank was signalled: stop at the same step
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
