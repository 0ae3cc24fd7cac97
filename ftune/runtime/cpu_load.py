"""How much of this process's cores other processes use right now, read from /proc/stat.

The 1-minute load average says that a machine was busy over the last minute, not how busy the cores
this run may use are now, and it counts this process's own threads. :func:`others_cores` samples the
kernel's per-CPU time counters twice, ``window_s`` apart, while this process sleeps: the busy time of
the CPUs in this process's affinity set over the window, less what this process itself used, is the
number of cores' worth of work other processes did. Torch-free: a start-up check reads it before any
model exists.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PROC_STAT = Path("/proc/stat")
# /proc/stat's per-CPU columns: user nice system idle iowait irq softirq steal (guest time is inside user).
IDLE_COLUMNS = (3, 4)  # idle, iowait
COUNTED_COLUMNS = 8


def cpu_times(text: str, cpus: set[int]) -> tuple[int, int]:
    """``(busy, total)`` clock ticks of the CPUs in ``cpus``, summed over their ``cpuN`` lines of ``text``.

    Raises:
        ValueError: when ``text`` has no line for one of ``cpus`` (a container may hide them).
    """
    busy = total = 0
    seen = set()
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        ticks = [int(v) for v in rest.split()[:COUNTED_COLUMNS]]
        idle = sum(ticks[i] for i in IDLE_COLUMNS if i < len(ticks))
        total += sum(ticks)
        busy += sum(ticks) - idle
        seen.add(int(name[3:]))
    if seen != cpus:
        raise ValueError(f"/proc/stat has no line for cpu(s) {sorted(cpus - seen)}")
    return busy, total


def usable_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity set; every CPU where the platform has none)."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def others_cores(window_s: float = 0.25, *, stat: Path = PROC_STAT) -> float | None:
    """Cores' worth of work other processes did on this process's CPUs over the next ``window_s`` seconds.

    0.0 on an idle machine, up to ``len(usable_cpus())`` when others keep every core busy. This process
    sleeps through the window; the CPU time it still used (its other threads) is subtracted. None where
    the counters cannot be read (no /proc: not Linux).
    """
    cpus = usable_cpus()
    try:
        busy0, total0 = cpu_times(stat.read_text(), cpus)
        own0 = time.process_time()
        time.sleep(window_s)
        busy1, total1 = cpu_times(stat.read_text(), cpus)
        own1 = time.process_time()
    except (OSError, ValueError):
        return None
    ticks = total1 - total0
    if ticks <= 0:
        return None
    share = (busy1 - busy0) / ticks  # busy share of the CPUs' time over the window
    own = (own1 - own0) / (window_s * len(cpus))  # this process's share of the same time
    return max(0.0, share - own) * len(cpus)
