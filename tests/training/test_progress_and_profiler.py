import pytest
import torch

from ftune.training.run.profiler import Profiler
from ftune.training.run.progress import ProgressBar


def test_progress_bar_tracks_steps_and_shows_metrics(capsys):
    with ProgressBar(10, initial_step=2) as bar:
        bar.update(3, loss=2.5, lr=1e-4, tokens_per_second=1234.5, peak_memory_gib=1.5)
        bar.update(5, loss=2.25, lr=1e-4)
        assert bar._bar.n == 5
        assert not bar.disabled
    err = capsys.readouterr().err
    assert "step 3" in err and "loss=2.5000" in err and "tok/s=1234" in err and "mem=1.50GiB" in err


def test_progress_bar_is_silent_off_rank_zero_or_when_disabled(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    with ProgressBar(10) as bar:
        bar.update(1, loss=1.0, lr=0.1)
        assert bar.disabled
    monkeypatch.setenv("RANK", "0")
    with ProgressBar(10, enabled=False) as bar:
        bar.update(1, loss=1.0, lr=0.1)
    assert capsys.readouterr().err == ""


def _steps(prof: Profiler, n: int) -> None:
    x = torch.randn(16, 16)
    for _ in range(n):
        (x @ x).sum()
        prof.step()


def test_disabled_profiler_is_a_no_op(tmp_path):
    with Profiler(output_dir=tmp_path / "prof") as prof:
        _steps(prof, 3)
    assert not (tmp_path / "prof").exists()


def test_enabled_profiler_writes_a_trace(tmp_path):
    with Profiler(enabled=True, output_dir=tmp_path / "prof", wait=0, warmup=1, active=1) as prof:
        _steps(prof, 3)
    traces = list((tmp_path / "prof").glob("*.json"))
    assert len(traces) == 1 and traces[0].stat().st_size > 0


def test_profiler_schedule_errors():
    with pytest.raises(
        ValueError, match=r"active >= 1; got \{'wait': 1, 'warmup': 1, 'active': 0, 'repeat': 1\}"
    ):
        Profiler(enabled=True, active=0)
    Profiler(enabled=False, active=0)  # not checked when disabled
