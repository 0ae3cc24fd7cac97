from pathlib import Path

import pytest
import torch

from ftune.training.run.memory import peak_memory_gib, reset_peak_memory
from ftune.training.run.throughput import Throughput


def test_peak_memory_is_positive_and_tracks_a_big_allocation():
    stats = peak_memory_gib("cpu")
    assert set(stats) == {"peak_rss_gib"}
    assert 0 < stats["peak_rss_gib"] < 1024
    block = torch.ones(256 * 1024 * 1024, dtype=torch.uint8)  # 256 MiB, touched
    with_block = peak_memory_gib(torch.device("cpu"))["peak_rss_gib"]
    assert with_block >= 0.25
    del block
    reset_peak_memory("cpu")
    if Path("/proc/self/clear_refs").exists():  # Linux: the peak restarts from the current RSS
        assert peak_memory_gib("cpu")["peak_rss_gib"] < with_block - 0.2


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_throughput_over_a_window():
    clock = FakeClock()
    meter = Throughput(window=2, clock=clock)
    clock.now += 2.0
    assert meter.update(100) == pytest.approx(50.0)
    clock.now += 1.0
    assert meter.update(100) == pytest.approx(200 / 3)
    clock.now += 1.0
    assert meter.update(400) == pytest.approx(500 / 2)  # the first step left the window
    clock.now += 50.0  # e.g. a checkpoint save
    meter.reset()
    clock.now += 1.0
    assert meter.update(30) == pytest.approx(30.0)
    assert Throughput(clock=clock).update(5) == 0.0  # no time passed
    with pytest.raises(ValueError, match="Throughput: window must be a positive int, got 0"):
        Throughput(window=0)
