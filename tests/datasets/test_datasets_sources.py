import json
import time

import pytest

from ftune.datasets.source import HubUnreachableError, load_source

ROWS = [{"input": "a", "output": "x1"}, {"input": "b", "output": "x2"}, {"input": "c", "output": "x3"}]


def _write(path, rows=ROWS):
    import datasets

    suffix = path.suffix
    if suffix == ".json":
        path.write_text(json.dumps(rows))
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif suffix == ".csv":
        datasets.Dataset.from_list(rows).to_csv(str(path), index=False)
    elif suffix == ".parquet":
        datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".csv", ".parquet"])
def test_local_files_load_by_path(tmp_path, suffix):
    ds = load_source(str(_write(tmp_path / f"data{suffix}")))
    assert [dict(r) for r in ds] == ROWS


def test_txt_file_gives_a_text_column_one_line_per_row(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("first line\nsecond line\n")
    ds = load_source(str(path))
    assert ds.column_names == ["text"] and ds["text"] == ["first line", "second line"]


def test_folder_and_builder_name_and_split_slicing(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    _write(folder / "train.jsonl")
    assert len(load_source(str(folder))) == 3
    path = _write(tmp_path / "x.json")
    assert [r["output"] for r in load_source("json", data_files=str(path), split="train[:2]")] == ["x1", "x2"]


def test_missing_local_path_is_not_sent_to_the_hub(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"Dataset source '.*nope.jsonl' looks like a local path but does not exist"
    ):
        load_source(str(tmp_path / "nope.jsonl"))


def test_unsupported_suffix_and_builder_without_files(tmp_path):
    path = tmp_path / "data.xml"
    path.write_text("<a/>")
    with pytest.raises(
        ValueError,
        match=r"has suffix '.xml'; accepted file suffixes are \['.csv', '.json', '.jsonl', '.parquet', '.txt'\]",
    ):
        load_source(str(path))
    with pytest.raises(
        ValueError, match="Dataset source 'json' is a file-format builder and needs data_files"
    ):
        load_source("json")


OFFLINE_MESSAGE = (
    r"Cannot load dataset source 'ftune-made-up/no-such-dataset-x9': it is not a local file or folder, so it "
    r"was taken as a Hugging Face Hub dataset id, but .* Pass a local file instead: source=path/to/data.jsonl"
)


def test_offline_env_fails_fast_with_one_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(HubUnreachableError, match=OFFLINE_MESSAGE + r".*") as info:
        load_source("ftune-made-up/no-such-dataset-x9")
    assert time.monotonic() - start < 5.0
    assert "offline mode is set (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE)" in str(info.value)


def test_unreachable_hub_fails_fast_with_one_clear_error(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: "no network"
    start = time.monotonic()
    with pytest.raises(HubUnreachableError, match=OFFLINE_MESSAGE) as info:
        load_source("ftune-made-up/no-such-dataset-x9")
    assert time.monotonic() - start < 5.0
    assert "the Hub could not be reached (no network)" in str(info.value)


def test_offline_mode_is_restored_after_the_attempt(monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    before = datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(HubUnreachableError):
        load_source("ftune-made-up/no-such-dataset-x9")
    assert (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE) == before
