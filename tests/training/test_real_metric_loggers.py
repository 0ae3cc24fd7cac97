"""TensorBoard and W&B loggers with the real packages: what they write is read back."""

import time

import pytest

from ftune.training.run.metric_logging import TensorBoardLogger, WandBLogger


def test_tensorboard_event_files_parse_back_to_the_logged_scalars(tmp_path):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator", reason="pip install 'ftune[tensorboard]'"
    )
    with TensorBoardLogger(tmp_path / "tb") as metrics:
        metrics.log_dict({"loss": 2.5, "lr": 1e-3}, step=1)
        metrics.log_dict({"loss": 2.0, "lr": 5e-4}, step=2)
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    events = event_accumulator.EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["loss", "lr"]
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(1, 2.5), (2, 2.0)]
    assert [e.step for e in events.Scalars("lr")] == [1, 2]
    assert events.Scalars("lr")[1].value == pytest.approx(5e-4)


def test_wandb_offline_run_writes_a_run_folder_with_the_history(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="pip install 'ftune[wandb]'")
    monkeypatch.setenv("WANDB_MODE", "offline")  # no network, no account
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "data"))
    with WandBLogger("ftune-test", name="tiny", log_dir=tmp_path, config={"rank": 8}) as metrics:
        metrics.log_dict({"loss": 2.5}, step=1)
        metrics.log_dict({"loss": 2.0}, step=2)
    (run,) = (tmp_path / "wandb").glob("offline-run-*")
    (data,) = run.glob("run-*.wandb")
    deadline = time.monotonic() + 30
    while "exit" not in (kinds := [r.WhichOneof("record_type") for r in wandb_records(data)]):
        assert time.monotonic() < deadline, f"{data} never got its exit record: {kinds}"
        time.sleep(0.2)  # wandb's service process may still be writing after finish() returns
    history = [
        {item.key or "/".join(item.nested_key): item.value_json for item in record.history.item}
        for record in wandb_records(data)
        if record.WhichOneof("record_type") == "history"
    ]
    logged = [(h.get("_step"), float(h["loss"])) for h in history if "loss" in h]
    assert logged == [("1", 2.5), ("2", 2.0)], f"history records {history}; all records {kinds}"


def wandb_records(path):
    """The protobuf records of a .wandb file: a 7-byte header, then a leveldb-style log (32 KiB blocks of
    chunks, each `crc32 (4) | length (2, little endian) | type (1: full, 2: first, 3: middle, 4: last)`)."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", data[:7]
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the tail of a block too short for a header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0 and length == 0:
            break
        pending += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record
