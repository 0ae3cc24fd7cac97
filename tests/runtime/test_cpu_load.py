"""Other processes' share of this run's cores, from /proc/stat (ftune.runtime.cpu_load)."""

import multiprocessing
import sys
import time

import pytest

from ftune.runtime import cpu_load

STAT = """cpu  300 0 100 600 0 0 0 0 0 0
cpu0 100 0 50 300 0 0 0 0 0 0
cpu1 200 0 50 300 0 0 0 0 0 0
intr 12345
"""


def test_the_busy_and_total_ticks_of_the_named_cpus():
    assert cpu_load.cpu_times(STAT, {0}) == (150, 450)
    assert cpu_load.cpu_times(STAT, {0, 1}) == (400, 1000)


def test_a_cpu_without_its_line_is_refused():
    with pytest.raises(ValueError, match=r"no line for cpu\(s\) \[2\]"):
        cpu_load.cpu_times(STAT, {0, 2})


class _Counters:
    """A /proc/stat whose counters move between the two reads: cpu0 half busy, cpu1 fully busy."""

    def __init__(self) -> None:
        self.texts = [
            "cpu0 100 0 0 100 0 0 0 0\ncpu1 100 0 0 100 0 0 0 0\n",
            "cpu0 150 0 0 150 0 0 0 0\ncpu1 200 0 0 100 0 0 0 0\n",
        ]

    def read_text(self) -> str:
        return self.texts.pop(0)


def test_others_cores_is_the_busy_share_times_the_cpus(monkeypatch):
    monkeypatch.setattr(cpu_load, "usable_cpus", lambda: {0, 1})
    others = cpu_load.others_cores(0.01, stat=_Counters())
    # 150 busy ticks of 200 over the window: 1.5 cores' worth (less this sleeping process's own ~0).
    assert others == pytest.approx(1.5, abs=0.05)


def test_unreadable_counters_give_none(tmp_path):
    assert cpu_load.others_cores(0.01, stat=tmp_path / "missing") is None


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")
def test_a_spinning_process_is_seen_as_work_of_others():
    cpus = cpu_load.usable_cpus()
    spinners = [multiprocessing.get_context("spawn").Process(target=_spin, args=(6.0,)) for _ in cpus]
    for p in spinners:
        p.start()
    try:
        time.sleep(1.0)  # the spawned interpreters start and spin
        others = cpu_load.others_cores(0.5)
    finally:
        for p in spinners:
            p.terminate()
            p.join()
    # One spinner a usable CPU keeps every one busy: nearly all of them are other processes' work
    # (whatever else runs beside the test only adds to it).
    assert others is not None and others >= 0.6 * len(cpus)
