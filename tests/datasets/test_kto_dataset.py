"""KTO data: records checked when loaded (file:line, both labels present), prompt and completion split, the
collate's completions then mismatched rows (TRL's rotation), the row kinds the loss reads."""

import json

import pytest
import torch

from ftune.data import padded_collate_kto
from ftune.data.collate import KTO_DESIRABLE, KTO_MISMATCHED, KTO_UNDESIRABLE
from ftune.datasets import kto_dataset


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


ROWS = [
    {"prompt": "q1", "completion": "a1", "label": True},
    {"prompt": "q2", "completion": "b22", "label": False},
    {
        "prompt": [{"role": "user", "content": "q3"}],
        "completion": [{"role": "assistant", "content": "c"}],
        "label": True,
    },
]


def test_items_split_prompt_and_completion(tmp_path, tokenizer):
    ds = kto_dataset(tokenizer, source=_jsonl(tmp_path / "k.jsonl", ROWS))
    got = [
        (tokenizer.decode(i["prompt_tokens"]), tokenizer.decode(i["completion_tokens"]), i["label"])
        for i in ds
    ]
    assert got == [("q1", "a1", True), ("q2", "b22", False), ("q3", "c", True)]
    assert all(i["completion_labels"] == i["completion_tokens"] for i in ds)  # every answer token is trained


def test_collate_puts_completion_i_minus_1_after_prompt_i(tmp_path, tokenizer):
    items = list(kto_dataset(tokenizer, source=_jsonl(tmp_path / "k.jsonl", ROWS)))
    batch = padded_collate_kto(items, pad_id=0)
    n = len(items)
    assert batch["tokens"].shape[0] == 2 * n
    kinds = batch["row_kinds"].tolist()
    assert kinds == [KTO_DESIRABLE, KTO_UNDESIRABLE, KTO_DESIRABLE] + [KTO_MISMATCHED] * n
    assert "document_ids" not in batch  # not packed: a padded batch with one kind a row
    for i, item in enumerate(items):
        other = items[i - 1]
        row = item["prompt_tokens"] + other["completion_tokens"]
        assert batch["tokens"][n + i, : len(row)].tolist() == row
        labels = batch["labels"][n + i, : len(row)].tolist()
        assert labels == [-100] * len(item["prompt_tokens"]) + other["completion_labels"]
        assert bool((batch["labels"][n + i, len(row) :] == -100).all())


def test_a_batch_of_one_pairs_its_completion_with_its_own_prompt(tmp_path, tokenizer):
    items = list(kto_dataset(tokenizer, source=_jsonl(tmp_path / "k.jsonl", ROWS)))
    batch = padded_collate_kto(items[:1], pad_id=0)  # an epoch's last batch: TRL's rotation of one
    assert batch["tokens"].shape[0] == 2 and torch.equal(batch["tokens"][0], batch["tokens"][1])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"prompt": "q", "label": True}, r"k.jsonl:3: the completion 'completion' is null"),
        (
            {"prompt": "q", "completion": " ", "label": True},
            r"k.jsonl:3: the completion 'completion' is a str",
        ),
        (
            {"prompt": "q", "completion": "a", "label": "yes"},
            r"k.jsonl:3: the label 'label' is a str \('yes'\)",
        ),
        ({"prompt": "", "completion": "a", "label": False}, r"k.jsonl:3: the prompt 'prompt' is empty"),
    ],
)
def test_bad_records_are_refused_with_file_and_line(tmp_path, tokenizer, bad, message):
    src = _jsonl(tmp_path / "k.jsonl", [*ROWS[:2], bad])
    with pytest.raises(ValueError, match=message):
        kto_dataset(tokenizer, source=src)


def test_one_label_value_is_refused_with_the_counts(tmp_path, tokenizer):
    src = _jsonl(tmp_path / "k.jsonl", [ROWS[0]] * 4)
    with pytest.raises(
        ValueError, match=r"4 desirable \(true\) and 0 undesirable \(false\) record\(s\); KTO needs"
    ):
        kto_dataset(tokenizer, source=src)
    renamed = [{"q": "x", "a": "y", "good": False}] * 2
    with pytest.raises(ValueError, match=r"\('good'\): 0 desirable \(true\) and 2 undesirable"):
        kto_dataset(tokenizer, source=_jsonl(tmp_path / "r.jsonl", renamed),
                    column_map={"prompt": "q", "completion": "a", "label": "good"})  # fmt: skip


def test_unknown_column_map_key_is_refused(tmp_path, tokenizer):
    with pytest.raises(
        KeyError, match=r"reads \['prompt', 'completion', 'label'\]; got the key\(s\) \['chosen'\]"
    ):
        kto_dataset(tokenizer, source=_jsonl(tmp_path / "k.jsonl", ROWS), column_map={"chosen": "x"})


def test_rows_of_a_builder_source_are_checked(tmp_path, tokenizer):
    files = _jsonl(tmp_path / "part.jsonl", [ROWS[0], ROWS[0]])
    with pytest.raises(ValueError, match=r"2 desirable \(true\) and 0 undesirable"):
        kto_dataset(tokenizer, source="json", data_files=files)
