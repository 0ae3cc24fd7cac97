"""`ftune plot` and ftune.training.run.plotting: the PNG is read back, and every series was drawn."""

import json

import numpy as np
import pytest

from ftune.cli.main import main as ftune
from ftune.training.run import plotting

matplotlib = pytest.importorskip("matplotlib", reason="pip install 'ftune[plot]'")


def write_run(folder, losses, *, val=None, memory=True, lr=1e-3):
    """A DiskLogger-style run: output_dir/logs/metrics_1.jsonl."""
    (folder / "logs").mkdir(parents=True)
    lines = []
    for step, loss in enumerate(losses, start=1):
        record = {"step": step, "loss": loss, "lr": lr * step, "tokens_per_second": 100.0 + step}
        if memory:
            record["peak_memory_gib"] = 1.5 + 0.01 * step
        lines.append(json.dumps(record))
        if val and step in val:
            lines.append(json.dumps({"step": step, "val_loss": val[step]}))
    (folder / "logs" / "metrics_1.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_read_metrics_merges_files_and_keeps_the_last_value_of_a_step(tmp_path):
    run = write_run(tmp_path / "run", [3.0, 2.0], val={2: 2.5})
    (run / "logs" / "metrics_2.jsonl").write_text('{"step": 2, "loss": 1.9}\n{"step": 3, "loss": 1.5}\n')
    metrics = plotting.read_metrics(run)
    assert metrics["loss"] == [(1, 3.0), (2, 1.9), (3, 1.5)]
    assert metrics["val_loss"] == [(2, 2.5)]
    assert plotting.read_metrics(run / "logs" / "metrics_1.jsonl")["loss"] == [(1, 3.0), (2, 2.0)]


def test_draw_plots_every_series_of_every_run_with_its_data(tmp_path):
    runs = {
        "full": plotting.read_metrics(write_run(tmp_path / "full", [3.0, 2.0, 1.0], val={3: 1.2})),
        "lora": plotting.read_metrics(write_run(tmp_path / "lora", [3.0, 2.5, 2.0], memory=False)),
    }
    figure, drawn = plotting.draw(runs)
    assert drawn == {
        "loss": {"full": 3, "full (val_loss)": 1, "lora": 3},
        "learning rate": {"full": 3, "lora": 3},
        "tokens/s": {"full": 3, "lora": 3},
        "peak memory": {"full": 3},
    }
    lines = {ax.get_title(): {line.get_label(): line for line in ax.get_lines()} for ax in figure.axes}
    assert list(lines["loss"]["lora"].get_ydata()) == [3.0, 2.5, 2.0]
    assert list(lines["loss"]["full (val_loss)"].get_xdata()) == [3]
    assert lines["loss"]["full (val_loss)"].get_linestyle() == "--"
    assert lines["loss"]["full"].get_color() != lines["loss"]["lora"].get_color()
    assert list(lines["tokens/s"]["full"].get_ydata()) == [101.0, 102.0, 103.0]
    matplotlib.pyplot.close(figure)


def test_an_online_rl_run_gets_its_reward_and_length_panels(tmp_path):
    run = write_run(tmp_path / "grpo", [0.0, 0.0])
    with open(run / "logs" / "metrics_1.jsonl", "a") as f:
        f.write('{"step": 1, "reward": 0.5, "completions/mean_length": 11.0}\n')
        f.write('{"step": 2, "reward": 0.75, "val_reward": 0.7, "completions/mean_length": 10.0}\n')
    figure, drawn = plotting.draw({"grpo": plotting.read_metrics(run)})
    assert drawn["reward"] == {"grpo": 2, "grpo (val_reward)": 1}
    assert drawn["completion length"] == {"grpo": 2}
    sft, plain = plotting.draw({"sft": plotting.read_metrics(write_run(tmp_path / "sft", [1.0]))})
    assert "reward" not in plain and len(sft.axes) == 4  # an SFT run keeps its four panels
    matplotlib.pyplot.close(figure)
    matplotlib.pyplot.close(sft)


def test_ftune_plot_writes_a_png_with_one_colour_per_run(tmp_path, capsys):
    write_run(tmp_path / "full", [3.0, 2.0, 1.0])
    write_run(tmp_path / "lora", [3.0, 2.5, 2.0])
    write_run(tmp_path / "qat", [3.2, 2.6, 2.1])
    out = tmp_path / "cmp.png"
    assert (
        ftune(["plot", str(tmp_path / "full"), str(tmp_path / "lora"), str(tmp_path / "qat"), "-o", str(out)])
        == 0
    )
    assert f"wrote {out}: loss (3 lines), learning rate (3 lines)" in capsys.readouterr().out
    image = matplotlib.image.imread(out)
    assert image.shape[:2] == (700, 1100)  # figsize (11, 7) at 100 dpi
    pixels = image[..., :3].reshape(-1, 3)
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for hex_colour in cycle[:3]:  # each run's colour is on the canvas, in many pixels (its lines)
        close = (abs(pixels - np.array(matplotlib.colors.to_rgb(hex_colour))) < 0.02).all(axis=1)
        assert close.sum() > 200, hex_colour
    fourth = (abs(pixels - np.array(matplotlib.colors.to_rgb(cycle[3]))) < 0.02).all(axis=1)
    assert fourth.sum() < 20  # no fourth run: the check above can tell colours apart


def test_one_run_defaults_to_plot_png_in_its_folder(tmp_path):
    run = write_run(tmp_path / "lora", [3.0, 2.0])
    assert ftune(["plot", str(run)]) == 0
    assert matplotlib.image.imread(run / "plot.png").shape[:2] == (700, 1100)


def test_errors_say_what_is_missing_and_how_to_fix_it(tmp_path, capsys, monkeypatch):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        ftune(["plot", str(tmp_path / "empty")])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("ftune plot: error: no metrics in") and "ftune.training.DiskLogger" in err
    with pytest.raises(FileNotFoundError, match="does not exist. Give a run's output_dir"):
        plotting.read_metrics(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="2 labels for 1 runs"):
        plotting.plot_runs([tmp_path / "empty"], tmp_path / "x.png", labels=["a", "b"])
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install 'ftune\[plot\]'"):
        plotting.draw({"a": {"loss": [(1, 1.0)]}})
