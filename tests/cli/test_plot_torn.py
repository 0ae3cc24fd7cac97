"""`ftune plot` after a killed run (torn last line) and with -o a folder (issue 26)."""

import json
from pathlib import Path

import pytest

from ftune.cli.main import main as ftune
from ftune.training.run import plotting

matplotlib = pytest.importorskip("matplotlib", reason="pip install 'ftune[plot]'")


def _run(folder: Path, tail: str = "") -> Path:
    (folder / "logs").mkdir(parents=True)
    lines = [json.dumps({"step": s, "loss": 3.0 - s / 10, "lr": 1e-3}) for s in (1, 2, 3)]
    (folder / "logs" / "metrics_1.jsonl").write_text("\n".join(lines) + "\n" + tail)
    return folder


def test_a_torn_last_line_is_skipped_with_one_warning(tmp_path: Path, capsys) -> None:
    run = _run(tmp_path / "killed", tail='{"step": 4, "loss": 2.')  # what kill -9 mid-write leaves
    out = tmp_path / "killed.png"
    assert ftune(["plot", str(run), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    metrics = run / "logs" / "metrics_1.jsonl"
    assert captured.err == (
        f"ftune plot: warning: skipped {metrics}:4, a torn last line (the run was killed while writing it): "
        '\'{"step": 4, "loss": 2.\'\n'
    )
    assert f"wrote {out}: loss (1 line)" in captured.out and out.is_file()
    assert plotting.read_metrics(run, warn=lambda m: None)["loss"] == [(1, 2.9), (2, 2.8), (3, 2.7)]


def test_a_corrupt_line_before_the_last_is_still_an_error(tmp_path: Path) -> None:
    run = _run(tmp_path / "bad")
    metrics = run / "logs" / "metrics_1.jsonl"
    lines = metrics.read_text().splitlines()
    lines[1] = lines[1][:10]
    metrics.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{metrics}:2 is not JSON .*Only a file's last line may be torn"):
        plotting.read_metrics(run)


def test_output_folder_gets_plot_png_and_the_message_names_it(tmp_path: Path, capsys) -> None:
    run = _run(tmp_path / "run")
    folder = tmp_path / "plots"
    folder.mkdir()
    assert ftune(["plot", str(run), "-o", str(folder)]) == 0
    assert f"wrote {folder / 'plot.png'}: " in capsys.readouterr().out
    assert (folder / "plot.png").is_file() and not (tmp_path / "plots.png").exists()
    assert ftune(["plot", str(run), "-o", str(tmp_path / "noext")]) == 0  # matplotlib adds .png: say so
    assert f"wrote {tmp_path / 'noext.png'}: " in capsys.readouterr().out


def test_output_onto_a_metrics_file_is_refused(tmp_path: Path, capsys) -> None:
    run = _run(tmp_path / "run")
    metrics = run / "logs" / "metrics_1.jsonl"
    before = metrics.read_bytes()
    with pytest.raises(SystemExit):
        ftune(["plot", str(run), "-o", str(metrics)])
    err = capsys.readouterr().err
    assert f"-o/--output '{metrics}' is metrics_1.jsonl, a metrics file of run 1" in err
    assert metrics.read_bytes() == before
