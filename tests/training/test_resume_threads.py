"""A resume continues at the thread count its step folder was saved at (issue 46; ftune.training.run.resume).

The recipes' end-to-end checks are tests/recipes/test_resume_conditions.py, test_signals.py and the kill
driver; these are the rule's cases: OMP_NUM_THREADS set, unusable, absent, and a folder without a count.
"""

import pytest
import torch

from ftune.training.run import resume


@pytest.fixture(autouse=True)
def _threads_back(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_the_saved_count_is_taken_back_and_said(caplog):
    resume._restore_threads(3)
    assert torch.get_num_threads() == 3
    assert "resuming at 3 thread(s), as the step folder was saved (this process was at 1)" in caplog.text


def test_the_saved_count_already_in_force_says_nothing(caplog):
    resume._restore_threads(1)
    assert torch.get_num_threads() == 1 and caplog.text == ""


def test_omp_num_threads_wins_with_a_warning(monkeypatch, caplog):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    resume._restore_threads(3)
    assert torch.get_num_threads() == 2
    assert "saved by a run at 3 thread(s) and OMP_NUM_THREADS=2 sets 2" in caplog.text
    assert "Set OMP_NUM_THREADS=3 (or unset it) to resume bit for bit." in caplog.text


@pytest.mark.parametrize("env", ["0", "abc", "", "4,2"])
def test_an_unusable_omp_num_threads_leaves_the_saved_count(env, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", env)
    resume._restore_threads(2)
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("saved", [None, True, "2", 0, -1, 2.0])
def test_a_folder_without_a_usable_count_keeps_the_process_count(saved, caplog):
    resume._restore_threads(saved)  # a folder written before ftune recorded it, or a hand-edited one
    assert torch.get_num_threads() == 1 and caplog.text == ""
