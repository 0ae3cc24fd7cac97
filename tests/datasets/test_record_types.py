"""Prompts and message contents are checked by type, with the row; `datasets`' read errors name the file."""

from __future__ import annotations

import json

import pytest

from ftune.config.data_files import check_local_source
from ftune.datasets import chat_dataset, instruct_dataset, prompt_dataset
from ftune.datasets.source import load_source


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


GOOD = {"input": "a", "output": "b"}


@pytest.mark.parametrize(
    "bad, shown",
    [
        ({"input": None, "output": "b"}, "column 'input' is null"),
        ({"input": "a", "output": [1]}, r"column 'output' is a list \(\[1\]\)"),
    ],
)
def test_an_instruction_column_that_is_not_text_is_refused_with_its_row(tmp_path, tokenizer, bad, shown):
    source = _jsonl(tmp_path / "d.jsonl", [GOOD, GOOD, bad])
    with pytest.raises(
        ValueError, match=rf"Dataset {source} row 3: {shown}, not text; write it as a JSON string"
    ):
        instruct_dataset(tokenizer, source=source)


def test_numbers_in_an_instruction_column_are_their_text(tmp_path, tokenizer):
    # a CSV or parquet reader types a column of numbers as numbers: the answer 42 is the text "42"
    ds = instruct_dataset(tokenizer, source=_jsonl(tmp_path / "d.jsonl", [{"input": "6 x 7?", "output": 42}]))
    assert [m.content for m in ds.message_transform(ds.records[0])] == ["6 x 7?", "42"]


@pytest.mark.parametrize(
    "style, key, turn", [("openai", "messages", "content"), ("sharegpt", "conversations", "value")]
)
def test_a_message_whose_content_is_a_number_is_refused_with_its_row(tmp_path, tokenizer, style, key, turn):
    who = {"openai": ("role", "user", "assistant"), "sharegpt": ("from", "human", "gpt")}[style]
    good = {key: [{who[0]: who[1], turn: "q"}, {who[0]: who[2], turn: "a"}]}
    bad = {key: [{who[0]: who[1], turn: 7}, {who[0]: who[2], turn: "a"}]}
    source = _jsonl(tmp_path / "c.jsonl", [good, bad])
    with pytest.raises(
        ValueError, match=rf"Dataset {source} row 2: .*{key}\[0\]\.{turn} is an int \(7\), not text"
    ):
        chat_dataset(tokenizer, source=source, conversation_style=style)


@pytest.mark.parametrize(
    "prompt, shown",
    [
        (5, r"the prompt 'prompt' is an int \(5\)"),
        ([{"role": "user", "content": 5}], r"prompt\[0\]\.content is an int \(5\), not text"),
        ([{"role": "user", "content": None}], r"prompt\[0\]\.content is null, not text"),
    ],
)
def test_a_grpo_prompt_that_is_not_text_is_refused_with_its_row(tmp_path, tokenizer, prompt, shown):
    source = _jsonl(
        tmp_path / "p.jsonl", [{"prompt": "q", "answer": "a"}] * 40 + [{"prompt": prompt, "answer": "a"}]
    )
    with pytest.raises(ValueError, match=rf"prompt_dataset \({source}\) row 41: {shown}"):
        prompt_dataset(tokenizer, source=source)


def test_data_files_that_are_not_json_are_named_with_their_line(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello world\n")
    with pytest.raises(
        ValueError, match=rf"Dataset data_files {text}:1: not valid JSON .*'hello world'.*builder"
    ):
        check_local_source("json", str(text), every_line=True)  # what ftune run checks before the model loads
    with pytest.raises(ValueError, match=rf"Dataset data_files {text}:1: not valid JSON"):
        load_source("json", data_files={"train": [str(text)]})  # what the dataset says when it loads
    with pytest.raises(
        FileNotFoundError, match=r"Dataset data_files '.*nothere.json' does not exist \(source=json"
    ):
        check_local_source("json", str(tmp_path / "nothere.json"))


def test_a_read_error_diagnose_cannot_place_still_names_the_files_and_the_builder(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello world\n")
    with pytest.raises(
        ValueError,
        match=rf"Dataset source 'parquet' \(data_files '{text}'\): `datasets` could not read it with the 'parquet' "
        r"builder: ArrowInvalid: .*Check that each file is parquet data",
    ):
        load_source("parquet", data_files=str(text))
