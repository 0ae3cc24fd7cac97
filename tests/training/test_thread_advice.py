"""On a busy machine the run times the thread counts and says which is fastest (ftune.training.run.thread_advice)."""

import re
from pathlib import Path

import pytest
import torch

from ftune.runtime.matmul_speed import Product
from ftune.training.run import thread_advice

PRODUCTS = [Product(32, 64, 64, count=2)]


@pytest.fixture(autouse=True)
def _two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_the_counts_timed():
    assert thread_advice.candidate_counts(1) == [1]
    assert thread_advice.candidate_counts(2) == [1, 2]
    assert thread_advice.candidate_counts(6) == [1, 2, 4, 6]


def test_the_line_names_the_fastest_count_and_how_to_use_it():
    line = thread_advice.thread_advice(1.7, 2, {1: 0.05, 2: 0.2}, current=2)
    assert "other processes used 1.7 of the 2 core(s)" in line
    assert "200 ms at 2 thread(s), 50 ms at 1 thread(s)" in line
    assert "1 thread(s) is 4.0x faster" in line and "set OMP_NUM_THREADS=1" in line
    line = thread_advice.thread_advice(0.6, 2, {1: 0.3, 2: 0.2}, current=2)
    assert "2 threads, as set, is still the fastest" in line and "OMP_NUM_THREADS" not in line


def test_a_busy_machine_is_said_with_measured_times_and_the_count_is_kept(monkeypatch, capsys):
    monkeypatch.setattr(thread_advice, "others_cores", lambda window: 1.6)
    line = thread_advice.say_thread_advice(PRODUCTS, torch.device("cpu"))
    assert line is not None and line in capsys.readouterr().err
    assert "the machine is busy: other processes used 1.6" in line
    assert " ms at 2 thread(s), " in line and " ms at 1 thread(s)" in line
    assert torch.get_num_threads() == 2  # said, not changed


@pytest.mark.parametrize(
    "others, threads, device", [(0.2, 2, "cpu"), (None, 2, "cpu"), (1.6, 1, "cpu"), (1.6, 2, "meta")]
)
def test_nothing_is_said_when_idle_unknown_single_threaded_or_not_a_cpu(
    monkeypatch, capsys, others, threads, device
):
    monkeypatch.setattr(thread_advice, "others_cores", lambda window: others)
    torch.set_num_threads(threads)
    assert thread_advice.say_thread_advice(PRODUCTS, torch.device(device)) is None
    assert capsys.readouterr().err == ""


def test_the_thread_count_is_put_back_after_timing():
    times = thread_advice.time_thread_counts(PRODUCTS, [1, 2], rounds=1)
    assert sorted(times) == [1, 2] and all(0 < t < 10 for t in times.values())
    assert torch.get_num_threads() == 2


def test_the_glossary_shows_the_line_as_the_run_says_it():
    glossary = (Path(__file__).resolve().parents[2] / "docs" / "glossary.md").read_text()
    shown = re.search(r"^ftune: the machine is busy: .*$", glossary, flags=re.M).group(0)
    said = "ftune: " + thread_advice.thread_advice(1.5, 2, {1: 0.1, 2: 0.3}, current=2)
    elided = {"used 1.5 ": "used <c> ", "300 ms": "<a> ms", "100 ms": "<b> ms", "3.0x": "<r>x"}
    for figure, placeholder in elided.items():
        said = said.replace(figure, placeholder)
    assert shown == said
