import json
import sys
from functools import partial

import pytest

from ftune.data import (
    CROSS_ENTROPY_IGNORE_IDX,
    build_dataloader,
    padded_collate_preference,
    padded_collate_sft,
)
from ftune.data.packing import PackedDataset
from ftune.datasets import (
    ConcatDataset,
    alpaca_dataset,
    chat_dataset,
    concat_datasets,
    instruct_dataset,
    preference_dataset,
    text_completion_dataset,
)
from ftune.datasets.sft import SFTDataset

FAKE = sys.modules["ftune_tests_fake_tokenizer"]
IGN = CROSS_ENTROPY_IGNORE_IDX


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _answer_text(tok, item):
    return tok.decode([t for t, y in zip(item["tokens"], item["labels"]) if y != IGN])


def test_instruct_dataset_column_map_and_masking(tmp_path, tokenizer):
    src = _jsonl(tmp_path / "qa.jsonl", [{"q": "2+2?", "a": "4"}, {"q": "3+3?", "a": "6"}])
    ds = instruct_dataset(tokenizer, source=src, column_map={"input": "q", "output": "a"})
    assert isinstance(ds, SFTDataset) and len(ds) == 2
    item = ds[0]
    user, asst = FAKE.ROLE_IDS["user"], FAKE.ROLE_IDS["assistant"]
    assert item["tokens"] == [FAKE.BOS, user, *b"2+2?", FAKE.EOT, asst, *b"4", FAKE.EOT, FAKE.EOS]
    assert item["labels"] == [IGN] * 7 + [asst, ord("4"), FAKE.EOT, FAKE.EOS]
    trained = instruct_dataset(
        tokenizer, source=src, column_map={"input": "q", "output": "a"}, train_on_input=True
    )
    assert trained[0]["labels"] == [IGN] + item["tokens"][1:]


def test_missing_column_is_reported_at_build_time(tmp_path, tokenizer):
    src = _jsonl(tmp_path / "qa.jsonl", [{"q": "x", "a": "y"}])
    with pytest.raises(
        KeyError,
        match=r"has no column\(s\) \['input', 'output'\] needed by InputOutputToMessages; its columns are \['q', 'a'\]. Map them with column_map",
    ):
        instruct_dataset(tokenizer, source=src)


def test_alpaca_dataset_from_local_json(tmp_path, tokenizer):
    path = tmp_path / "alpaca.json"
    path.write_text(json.dumps([{"instruction": "Add", "input": "1 and 2", "output": "3"}]))
    ds = alpaca_dataset(tokenizer, source=str(path))
    text = tokenizer.decode(ds[0]["tokens"])
    assert "### Instruction:\nAdd\n\n### Input:\n1 and 2\n\n### Response:\n" in text
    assert _answer_text(tokenizer, ds[0]) == "3"


@pytest.mark.parametrize("style", ["sharegpt", "openai"])
def test_chat_dataset_styles(tmp_path, tokenizer, style):
    if style == "sharegpt":
        rows = [
            {
                "conversations": [
                    {"from": "human", "value": "hi"},
                    {"from": "gpt", "value": "yo"},
                    {"from": "human", "value": "q"},
                    {"from": "gpt", "value": "a"},
                ]
            }
        ]
    else:
        rows = [
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yo"},
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": "a"},
                ]
            }
        ]
    ds = chat_dataset(tokenizer, source=_jsonl(tmp_path / "c.jsonl", rows), conversation_style=style)
    assert _answer_text(tokenizer, ds[0]) == "yoa"  # both assistant turns, no user text


def test_chat_dataset_rejects_unknown_style(tmp_path, tokenizer):
    with pytest.raises(
        ValueError,
        match=r"conversation_style='chatml' is not supported; accepted values are \['openai', 'sharegpt'\]",
    ):
        chat_dataset(tokenizer, source="unused.jsonl", conversation_style="chatml")


def test_text_completion_from_txt_and_column_map(tmp_path, tokenizer):
    path = tmp_path / "c.txt"
    path.write_text("hello\nworld!\n")
    ds = text_completion_dataset(tokenizer, source=str(path))
    assert ds[0] == {"tokens": [FAKE.BOS, *b"hello", FAKE.EOS], "labels": [FAKE.BOS, *b"hello", FAKE.EOS]}
    src = _jsonl(tmp_path / "t.jsonl", [{"body": "abc"}])
    ds = text_completion_dataset(
        tokenizer, source=src, column_map={"text": "body"}, add_eos=False, max_seq_len=3
    )
    assert ds[0]["tokens"] == [FAKE.BOS, *b"ab"]
    with pytest.raises(KeyError, match=r"has no column\(s\) \['text'\] needed by text_completion_dataset"):
        text_completion_dataset(tokenizer, source=src)


def test_max_seq_len_truncates_tokens_and_labels(tmp_path, tokenizer):
    src = _jsonl(tmp_path / "qa.jsonl", [{"input": "abcdef", "output": "ghijkl"}])
    item = instruct_dataset(tokenizer, source=src, max_seq_len=10)[0]
    assert len(item["tokens"]) == len(item["labels"]) == 10


def test_packed_sft_dataset_and_loader(tmp_path, tokenizer):
    rows = [{"input": "q" * (i % 5 + 1), "output": "a" * (i % 3 + 1)} for i in range(30)]
    src = _jsonl(tmp_path / "qa.jsonl", rows)
    plain = instruct_dataset(tokenizer, source=src)
    packed = instruct_dataset(tokenizer, source=src, packed=True, max_seq_len=40)
    assert isinstance(packed, PackedDataset)
    assert all(len(packed[i]["tokens"]) == 40 for i in range(len(packed)))
    # every sample's tokens are in the packs, in order
    flat = [t for i in range(len(packed)) for t in packed[i]["tokens"] if t != tokenizer.pad_id]
    assert flat == [t for i in range(len(plain)) for t in plain[i]["tokens"]]
    loader = build_dataloader(
        packed, batch_size=2, collate_fn=partial(padded_collate_sft, pad_id=tokenizer.pad_id)
    )
    batch = next(iter(loader))
    assert set(batch) == {"tokens", "labels", "input_pos", "document_ids"} and batch["tokens"].shape == (
        2,
        40,
    )


def test_packed_needs_a_length(tmp_path, tokenizer):
    src = _jsonl(tmp_path / "qa.jsonl", [{"input": "q", "output": "a"}])
    with pytest.raises(
        ValueError,
        match="packed=True needs a pack length, but max_seq_len is not set on the dataset or the tokenizer",
    ):
        instruct_dataset(tokenizer, source=src, packed=True)
    packed = instruct_dataset(FAKE.FakeTokenizer(max_seq_len=16), source=src, packed=True)
    assert len(packed[0]["tokens"]) == 16


def test_packed_text_splits_long_texts(tmp_path, tokenizer):
    path = tmp_path / "c.txt"
    path.write_text("x" * 25 + "\nshort\n")
    packed = text_completion_dataset(tokenizer, source=str(path), packed=True, max_seq_len=10)
    # 27 tokens -> pieces 10, 10, 7; then "short" (7 tokens) does not fit after the 7: 4 rows
    assert len(packed) == 4
    dropped = text_completion_dataset(
        tokenizer, source=str(path), packed=True, max_seq_len=10, overlong="drop"
    )
    assert len(dropped) == 1


def test_pack_cache_skips_tokenization_on_second_build(tmp_path, tokenizer, monkeypatch):
    src = _jsonl(tmp_path / "qa.jsonl", [{"input": "q" * i, "output": "a"} for i in range(1, 20)])
    cache = tmp_path / "cache"
    first = instruct_dataset(tokenizer, source=src, packed=True, max_seq_len=32, pack_cache_dir=str(cache))
    assert first.cache_path.is_file()

    def fail(self, index):
        raise AssertionError("tokenized although the packed cache exists")

    monkeypatch.setattr(SFTDataset, "__getitem__", fail)
    second = instruct_dataset(tokenizer, source=src, packed=True, max_seq_len=32, pack_cache_dir=str(cache))
    assert second.cache_path == first.cache_path
    assert [second[i] for i in range(len(second))] == [first[i] for i in range(len(first))]
    # another tokenizer behaviour or another transform setting is another cache entry
    with pytest.raises(AssertionError, match="tokenized although"):
        instruct_dataset(
            tokenizer, source=src, packed=True, max_seq_len=32, pack_cache_dir=str(cache), train_on_input=True
        )
    with pytest.raises(AssertionError, match="tokenized although"):
        instruct_dataset(
            FAKE.FakeTokenizer(max_seq_len=30),
            source=src,
            packed=True,
            max_seq_len=32,
            pack_cache_dir=str(cache),
        )


def test_preference_dataset_and_collate(tmp_path, tokenizer):
    rows = [
        {"prompt": "q", "chosen": "good", "rejected": "bad!"},
        {"prompt": "r", "chosen": "y", "rejected": "n"},
    ]
    ds = preference_dataset(tokenizer, source=_jsonl(tmp_path / "p.jsonl", rows))
    item = ds[0]
    assert set(item) == {"chosen_tokens", "chosen_labels", "rejected_tokens", "rejected_labels"}
    assert (
        tokenizer.decode(item["chosen_tokens"]) == "qgood"
        and tokenizer.decode(item["rejected_tokens"]) == "qbad!"
    )
    assert (
        _answer_text(tokenizer, {"tokens": item["rejected_tokens"], "labels": item["rejected_labels"]})
        == "bad!"
    )
    batch = padded_collate_preference([ds[0], ds[1]], pad_id=tokenizer.pad_id)
    assert batch["tokens"].shape[0] == 4
    assert batch["tokens"][0, : len(item["chosen_tokens"])].tolist() == item["chosen_tokens"]
    assert batch["tokens"][2, : len(item["rejected_tokens"])].tolist() == item["rejected_tokens"]


def test_concat_dataset_mixes_and_rejects_mixed_kinds(tmp_path, tokenizer):
    a = instruct_dataset(tokenizer, source=_jsonl(tmp_path / "a.jsonl", [{"input": "a", "output": "1"}] * 2))
    b = chat_dataset(
        tokenizer,
        source=_jsonl(
            tmp_path / "b.jsonl",
            [{"messages": [{"role": "user", "content": "b"}, {"role": "assistant", "content": "2"}]}] * 3,
        ),
        conversation_style="openai",
    )
    mixed = ConcatDataset([a, b])
    assert len(mixed) == 5 and mixed[1] == a[1] and mixed[2] == b[0] and mixed[-1] == b[2]
    with pytest.raises(IndexError, match="ConcatDataset index 5 out of range for 5 items"):
        mixed[5]
    packed = instruct_dataset(tokenizer, source=str(tmp_path / "a.jsonl"), packed=True, max_seq_len=32)
    with pytest.raises(
        ValueError, match="the datasets yield different kinds of items, which cannot share a batch"
    ):
        ConcatDataset([a, packed])
    with pytest.raises(ValueError, match="got no datasets"):
        ConcatDataset([])


def test_concat_datasets_from_yaml(tmp_path, tokenizer):
    from ftune.config import instantiate

    a = _jsonl(tmp_path / "a.jsonl", [{"input": "a", "output": "1"}] * 2)
    b = _jsonl(tmp_path / "b.jsonl", [{"text": "hello"}] * 3)
    yaml = tmp_path / "mix.yaml"
    yaml.write_text(
        "dataset:\n"
        "  _component_: ftune.datasets.concat_datasets\n"
        "  datasets:\n"
        "    - _component_: ftune.datasets.instruct_dataset\n"
        "      _partial_: true\n"
        f"      source: {a}\n"
        "    - _component_: ftune.datasets.text_completion_dataset\n"
        "      _partial_: true\n"
        f"      source: {b}\n"
    )
    from ftune.config import load_config

    mixed = instantiate(load_config(yaml).dataset, tokenizer)
    assert isinstance(mixed, ConcatDataset) and len(mixed) == 5
    assert mixed[0] == instruct_dataset(tokenizer, source=a)[0]
    assert mixed[4] == text_completion_dataset(tokenizer, source=b)[2]
    with pytest.raises(ValueError, match=r"datasets\[1\] is a str \('oops'\), not a dataset builder"):
        concat_datasets(tokenizer, datasets=[partial(instruct_dataset, source=a), "oops"])
