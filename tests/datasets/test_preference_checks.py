"""Preference records are checked when loaded (file:line), answers stay strings, identical pairs are counted."""

import json
import logging

import pytest

from ftune.config.data_files import json_records
from ftune.datasets import load_source, preference_dataset


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


GOOD = {"prompt": "q", "chosen": "a", "rejected": "b"}


def test_a_date_like_answer_stays_a_string(tmp_path, tokenizer):
    src = _jsonl(tmp_path / "p.jsonl", [{"prompt": "When?", "chosen": "2024-01-01", "rejected": "never"}] * 2)
    assert load_source(src)[0]["chosen"] == "2024-01-01"  # Arrow alone types it as a timestamp
    assert load_source(src, split="train[:1]").num_rows == 1
    ds = preference_dataset(tokenizer, source=src)
    assert tokenizer.decode(ds[0]["chosen_tokens"]) == "When?2024-01-01"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"prompt": "q", "chosen": "a"},
            r"p.jsonl:3: no 'rejected' \(the record's keys: \['chosen', 'prompt'\]\)",
        ),
        ({"prompt": "q", "chosen": "a", "rejected": None}, r"p.jsonl:3: 'rejected' is null"),
        ({"prompt": "q", "chosen": "  ", "rejected": "b"}, r"p.jsonl:3: 'chosen' is empty"),
        ({"prompt": "q", "chosen": [], "rejected": "b"}, r"p.jsonl:3: 'chosen' is empty"),
        (
            {"prompt": "q", "chosen": 5, "rejected": "b"},
            r"p.jsonl:3: 'chosen' is a int \(5\), expected a string",
        ),
        (
            {"chosen": "a", "rejected": "b"},
            r"p.jsonl:3: the answers are strings, so the prompt 'prompt' is needed",
        ),
        ({"prompt": "", "chosen": "a", "rejected": "b"}, r"the prompt 'prompt' is needed, but it is empty"),
        (
            {"prompt": "q", "chosen": [{"role": "assistant", "content": ""}], "rejected": "b"},
            r"p.jsonl:3: 'chosen' is empty",
        ),
    ],
)
def test_an_unusable_record_is_refused_with_file_and_line(tmp_path, tokenizer, bad, message):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps(bad) + "\n")  # line 2 is blank
    with pytest.raises(ValueError, match=r"1 record\(s\) cannot train(.|\n)*" + message):
        preference_dataset(tokenizer, source=str(path))


def test_the_column_map_names_the_columns_checked(tmp_path, tokenizer):
    src = _jsonl(
        tmp_path / "p.jsonl", [{"q": "x", "good": "a", "bad": "b"}, {"q": "x", "good": "a", "bad": ""}]
    )
    with pytest.raises(ValueError, match=r"p.jsonl:2: 'bad' is empty"):
        preference_dataset(
            tokenizer, source=src, column_map={"prompt": "q", "chosen": "good", "rejected": "bad"}
        )


def test_many_bad_records_are_counted(tmp_path, tokenizer):
    src = _jsonl(tmp_path / "p.jsonl", [{"prompt": "q", "chosen": "a", "rejected": ""}] * 8)
    with pytest.raises(
        ValueError, match=r"8 record\(s\) cannot train(.|\n)*p.jsonl:5:.*\n  \.\.\. and 3 more"
    ):
        preference_dataset(tokenizer, source=src)


def test_identical_pairs_are_counted_in_a_warning(tmp_path, tokenizer, caplog):
    src = _jsonl(tmp_path / "p.jsonl", [GOOD, {"prompt": "q", "chosen": "same", "rejected": "same"}, GOOD])
    with caplog.at_level(logging.WARNING, logger="ftune.datasets.preference"):
        ds = preference_dataset(tokenizer, source=src)
    assert len(ds) == 3
    assert "1 of 3 record(s) have chosen == rejected (" + src + ":2)" in caplog.text


def test_records_of_a_loaded_dataset_are_checked_by_row(tmp_path, tokenizer):
    folder = tmp_path / "data"
    folder.mkdir()
    _jsonl(folder / "train.jsonl", [GOOD, {"prompt": "q", "chosen": "a", "rejected": ""}])
    with pytest.raises(ValueError, match=r"row 2: 'rejected' is empty"):
        preference_dataset(tokenizer, source=str(folder))


def test_json_records_of_a_json_array_know_their_lines(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('[\n  {"a": 1},\n\n  {"a": "2024-01-01",\n   "b": 2}, {"a": 3}\n]\n')
    assert json_records(path) == [(2, {"a": 1}), (4, {"a": "2024-01-01", "b": 2}), (5, {"a": 3})]
    path.write_text('{"data": []}')
    assert json_records(path) is None
