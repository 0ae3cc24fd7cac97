import io
import json
import sys

import pytest
import torch

from ftune.training.run.metric_logging import DiskLogger, StdoutLogger, TensorBoardLogger, WandBLogger


def test_disk_logger_writes_jsonl_and_appends(tmp_path):
    with DiskLogger(tmp_path / "logs", filename="m.jsonl") as metrics:
        metrics.log("loss", torch.tensor(2.5), step=1)
        metrics.log_dict({"loss": 2.25, "lr": 1e-4, "tokens": 128}, step=2)
    with DiskLogger(tmp_path / "logs", filename="m.jsonl") as metrics:  # a resumed run continues the file
        metrics.log("loss", 2.0, step=3)
    lines = [json.loads(line) for line in (tmp_path / "logs" / "m.jsonl").read_text().splitlines()]
    assert lines == [
        {"step": 1, "loss": 2.5},
        {"step": 2, "loss": 2.25, "lr": 1e-4, "tokens": 128},
        {"step": 3, "loss": 2.0},
    ]


def test_default_filename_and_closed_logger(tmp_path):
    metrics = DiskLogger(tmp_path)
    assert metrics.path.parent == tmp_path and metrics.path.name.startswith("metrics_")
    metrics.close()
    metrics.close()  # idempotent
    with pytest.raises(ValueError, match="DiskLogger is closed; create a new one"):
        metrics.log("loss", 1.0, step=1)


def test_stdout_logger_formats_one_line_per_call():
    stream = io.StringIO()
    metrics = StdoutLogger(stream=stream)
    metrics.log_dict({"loss": 2.345678, "tokens": 10}, step=4)
    assert stream.getvalue() == "step 4 | loss 2.346 | tokens 10\n"


def test_non_zero_rank_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    metrics = DiskLogger(tmp_path / "logs")
    metrics.log("loss", 1.0, step=1)
    metrics.close()
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize(
    ("cls", "args", "modules", "extra"),
    [
        (TensorBoardLogger, ("logs",), ("tensorboard", "torch.utils.tensorboard"), "tensorboard"),
        (WandBLogger, ("project",), ("wandb",), "wandb"),
    ],
)
def test_missing_optional_dependency_names_the_extra(monkeypatch, cls, args, modules, extra):
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError
    with pytest.raises(ImportError, match=rf"needs the `{extra}` package.*pip install 'ftune\[{extra}\]'"):
        cls(*args)
