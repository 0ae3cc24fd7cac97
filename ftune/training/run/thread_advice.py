"""Which thread count runs fastest while other processes hold the cores: measured, said before the first step.

On a CPU, PyTorch splits each matrix product over ``torch.get_num_threads()`` threads and waits for the
slowest. When other processes keep the cores busy, a thread that shares its core waits for its turn and
every product waits with it: two threads on two shared cores can be several times slower than one
(issue 31 measured tenfold on this project's 2-core machines). So before the first step the run looks
(``ftune.runtime.cpu_load.others_cores``: what other processes used of this run's CPUs over a quarter of
a second) and, when others use at least :data:`BUSY_CORES` of a core, times this model's step products
(the ones the dtype advice times) at the thread counts up to the current one, and says which runs
fastest now. It changes nothing: a thread count changes the sums' rounding, and resume continues at a
step folder's count (``ftune.training.run.resume``); the user sets ``OMP_NUM_THREADS`` for the next run.
"""

from __future__ import annotations

import sys

import torch

from ftune.runtime.cpu_load import others_cores, usable_cpus
from ftune.runtime.matmul_speed import Product, time_product

# Other processes' work, in cores, from which the run says the machine is busy and times thread counts.
BUSY_CORES = 0.5
WINDOW_S = 0.25  # how long the CPU counters are watched (the run sleeps meanwhile)
ROUNDS = 2  # each count is timed this many times, interleaved with the others: the best counts


def candidate_counts(current: int) -> list[int]:
    """The thread counts timed: 1, the powers of two below ``current``, and ``current``."""
    counts, t = {1, current}, 2
    while t < current:
        counts.add(t)
        t *= 2
    return sorted(counts)


def time_thread_counts(
    products: list[Product], counts: list[int], *, rounds: int = ROUNDS
) -> dict[int, float]:
    """Seconds of ``products`` (fp32, each times its count) at each thread count: the best of ``rounds``
    interleaved passes, so a burst of other work slows no count alone. The thread count is put back."""
    before = torch.get_num_threads()
    best = dict.fromkeys(counts, float("inf"))
    try:
        for _ in range(rounds):
            for t in counts:
                torch.set_num_threads(t)
                seconds = sum(time_product(p, torch.float32, repeats=1) * p.count for p in products)
                best[t] = min(best[t], seconds)
    finally:
        torch.set_num_threads(before)
    return best


def thread_advice(others: float, cores: int, times: dict[int, float], current: int) -> str:
    """The line the run says: how busy the machine is, the measured times, and the fastest count."""
    fastest = min(times, key=lambda t: times[t])
    figures = ", ".join(f"{times[t] * 1e3:.0f} ms at {t} thread(s)" for t in sorted(times, reverse=True))
    head = (
        f"the machine is busy: other processes used {others:.1f} of the {cores} core(s) this run may use "
        f"(measured over {WINDOW_S:g} s); a step's matrix products take {figures} now"
    )
    if fastest == current:
        return (
            head
            + f": {current} threads, as set, is still the fastest; steps will be slower than on an idle machine."
        )
    return head + (
        f": {fastest} thread(s) is {times[current] / times[fastest]:.1f}x faster while it stays busy. The run "
        f"goes on at {current} threads; set OMP_NUM_THREADS={fastest} to run at {fastest}."
    )


def say_thread_advice(products: list[Product], device: torch.device) -> str | None:
    """On a CPU run with two threads or more on a busy machine, time the thread counts and say (stderr)
    which is fastest; returns the line (None when there is nothing to say: GPU, one thread, idle machine,
    or no CPU counters)."""
    current = torch.get_num_threads()
    if device.type != "cpu" or current < 2:
        return None
    others = others_cores(WINDOW_S)
    if others is None or others < BUSY_CORES:
        return None
    times = time_thread_counts(products, candidate_counts(current))
    line = thread_advice(others, len(usable_cpus()), times, current)
    print(f"ftune: {line}", file=sys.stderr, flush=True)
    return line
