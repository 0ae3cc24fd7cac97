import datetime
import hashlib
import json
import re
from collections import Counter

import pytest

from ftune.data import CROSS_ENTROPY_IGNORE_IDX
from ftune.datasets.demo import (
    MONTHS,
    REJECTED_KINDS,
    demo_dataset,
    demo_preference_dataset,
    exact_match,
    generate_demo_examples,
    generate_demo_pairs,
    read_demo_examples,
    write_demo_data,
    write_demo_preference_data,
)

# sha256 of train.jsonl and heldout.jsonl as written by write_demo_data(folder) with the default
# arguments before the preference files existed: the quickstart's figures are measured on them.
QUICKSTART_SHA256 = {
    "train.jsonl": "7471e6f346a0e4c23ee02d269f699c4c0dd8496680829ac0848078d64f825f46",
    "heldout.jsonl": "7b421985dfba4693f8d038fb87a0fae423a3f45e87be0af97e581b420f7d3cef",
}


def _solve(prompt: str) -> str:
    """An independent solver of the demo prompts, via datetime."""
    m = re.fullmatch(r"Rewrite the date (.+) in the format (.+)\. Answer with the date only\.", prompt)
    src, fmt = m.groups()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", src):
        date = datetime.date.fromisoformat(src)
    else:
        month, day, year = re.fullmatch(r"(\w+) (\d+), (\d{4})", src).groups()
        date = datetime.date(int(year), MONTHS.index(month) + 1, int(day))
    return date.strftime({"DD/MM/YYYY": "%d/%m/%Y", "MM/DD/YYYY": "%m/%d/%Y", "YYYY-MM-DD": "%Y-%m-%d"}[fmt])


def test_write_demo_data_is_deterministic_and_heldout_is_disjoint(tmp_path):
    train, heldout = write_demo_data(tmp_path / "a", n_train=300, n_heldout=60, seed=0)
    again, _ = write_demo_data(tmp_path / "b", n_train=300, n_heldout=60, seed=0)
    other, _ = write_demo_data(tmp_path / "c", n_train=300, n_heldout=60, seed=1)
    assert train.read_bytes() == again.read_bytes()
    assert train.read_bytes() != other.read_bytes()
    tr, ho = read_demo_examples(train), read_demo_examples(heldout)
    assert (len(tr), len(ho)) == (300, 60)
    assert not {e.prompt for e in tr} & {e.prompt for e in ho}
    assert len({e.prompt for e in tr}) == 300
    # held-out does not depend on how much training data is asked for
    _, heldout_big = write_demo_data(tmp_path / "d", n_train=500, n_heldout=60, seed=0)
    assert heldout_big.read_bytes() == heldout.read_bytes()
    record = json.loads(train.read_text().splitlines()[0])
    assert [m["role"] for m in record["messages"]] == ["user", "assistant"]


def test_demo_answers_are_correct_short_and_the_tasks_are_mixed():
    examples = generate_demo_examples(300, seed=0)
    assert all(_solve(e.prompt) == e.answer for e in examples)
    formats = {re.search(r"format (\S+)\.", e.prompt).group(1) for e in examples}
    assert formats == {"DD/MM/YYYY", "MM/DD/YYYY", "YYYY-MM-DD"}
    assert max(len(e.prompt) + len(e.answer) for e in examples) < 110  # well under 60 tokens with any BPE
    assert generate_demo_examples(5, seed=3) == generate_demo_examples(5, seed=3)


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("14/07/2023", "14/07/2023", True),
        ("  14/07/2023\n", "14/07/2023", True),
        ("July  14,\n2023", "July 14, 2023", True),
        ("14/07/2023.", "14/07/2023", False),
        ("The date is 14/07/2023", "14/07/2023", False),
        ("", "14/07/2023", False),
    ],
)
def test_exact_match_normalises_whitespace_only(prediction, reference, expected):
    assert exact_match(prediction, reference) is expected


def test_demo_dataset_writes_missing_data_and_trains_on_the_answer(tmp_path, tokenizer):
    ds = demo_dataset(tokenizer, data_dir=str(tmp_path), n_train=30, n_heldout=10)
    assert (tmp_path / "train.jsonl").is_file() and len(ds) == 30
    first = read_demo_examples(tmp_path / "train.jsonl")[0]
    item = ds[0]
    answer = tokenizer.decode(
        [t for t, y in zip(item["tokens"], item["labels"]) if y != CROSS_ENTROPY_IGNORE_IDX]
    )
    assert answer == first.answer
    assert len(demo_dataset(tokenizer, data_dir=str(tmp_path), split="heldout")) == 10
    packed = demo_dataset(tokenizer, data_dir=str(tmp_path), packed=True, max_seq_len=256)
    assert len(packed[0]["tokens"]) == 256
    with pytest.raises(ValueError, match="split='test' is not accepted; use 'train' or 'heldout'"):
        demo_dataset(tokenizer, data_dir=str(tmp_path), split="test")


# --- the preference pairs (train_pref.jsonl, heldout_pref.jsonl) -------------------------------------


def test_the_quickstart_files_are_byte_identical_to_before(tmp_path):
    write_demo_data(tmp_path)
    assert {
        n: hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in QUICKSTART_SHA256
    } == QUICKSTART_SHA256
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["heldout.jsonl", "heldout_pref.jsonl", "train.jsonl", "train_pref.jsonl"]


def _expected_rejected(kind: str, prompt: str, answer: str) -> str:
    """The wrong answer of each kind, from the prompt and the right answer alone (independent of demo.py)."""
    if kind == "echo":
        return re.fullmatch(r"Rewrite the date (.+) in the format .+", prompt).group(1)
    if kind == "sentence":
        return f"The date is {answer}."
    if "/" in answer:  # DD/MM/YYYY or MM/DD/YYYY: the first two fields swapped
        a, b, year = answer.split("/")
        return f"{b}/{a}/{year}"
    year, month, day = answer.split("-")
    return f"{year}-{day}-{month}"


def _read_pairs(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_preference_pairs_are_the_sft_prompts_with_the_right_answer_chosen(tmp_path):
    train, heldout = write_demo_data(tmp_path, n_train=300, n_heldout=60, seed=0)
    for sft, pref in ((train, tmp_path / "train_pref.jsonl"), (heldout, tmp_path / "heldout_pref.jsonl")):
        examples, records = read_demo_examples(sft), _read_pairs(pref)
        assert len(records) == len(examples)
        for example, record in zip(examples, records):
            user = {"role": "user", "content": example.prompt}
            assert record["chosen"] == [user, {"role": "assistant", "content": example.answer}]
            assert record["rejected"][0] == user and record["rejected"][1]["role"] == "assistant"
            wrong = record["rejected"][1]["content"]
            assert wrong == _expected_rejected(record["rejected_kind"], example.prompt, example.answer)
            assert wrong != example.answer and not exact_match(wrong, example.answer)
    held_out_prompts = {r["chosen"][0]["content"] for r in _read_pairs(tmp_path / "heldout_pref.jsonl")}
    assert not held_out_prompts & {
        r["chosen"][0]["content"] for r in _read_pairs(tmp_path / "train_pref.jsonl")
    }


def test_each_prompt_has_one_rejected_kind_and_the_kinds_are_mixed():
    pairs = generate_demo_pairs(600, seed=0)
    kinds = Counter(p.kind for p in pairs)
    assert set(kinds) == set(REJECTED_KINDS) and min(kinds.values()) > 150, kinds
    # The kind depends on the prompt only: the same in a shorter run and across the three tasks.
    assert generate_demo_pairs(50, seed=0) == pairs[:50]
    by_task = Counter((re.search(r"format (\S+)\.", p.prompt).group(1), p.kind) for p in pairs)
    assert len(by_task) == 9, by_task
    # No swap where day == month (it would equal the right answer): another kind instead.
    same = [p for p in pairs if _expected_rejected("swap", p.prompt, p.chosen) == p.chosen]
    assert same and all(p.kind != "swap" for p in same)


def test_preference_files_are_added_to_an_existing_folder_without_touching_the_sft_files(tmp_path):
    (tmp_path / "train.jsonl").write_text("written before\n")
    (tmp_path / "heldout.jsonl").write_text("written before\n")
    write_demo_preference_data(tmp_path, n_train=20, n_heldout=5)
    assert (
        (tmp_path / "train.jsonl").read_text()
        == (tmp_path / "heldout.jsonl").read_text()
        == "written before\n"
    )
    assert len(_read_pairs(tmp_path / "train_pref.jsonl")) == 20
    assert len(_read_pairs(tmp_path / "heldout_pref.jsonl")) == 5


def test_demo_preference_dataset_writes_missing_pairs_and_scores_the_answers(tmp_path, tokenizer):
    ds = demo_preference_dataset(tokenizer, data_dir=str(tmp_path), n_train=30, n_heldout=10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["heldout_pref.jsonl", "train_pref.jsonl"]
    assert (
        len(ds) == 30
        and len(demo_preference_dataset(tokenizer, data_dir=str(tmp_path), split="heldout")) == 10
    )
    record, item = _read_pairs(tmp_path / "train_pref.jsonl")[0], ds[0]
    for side in ("chosen", "rejected"):
        labelled = [
            t for t, y in zip(item[f"{side}_tokens"], item[f"{side}_labels"]) if y != CROSS_ENTROPY_IGNORE_IDX
        ]
        assert tokenizer.decode(labelled) == record[side][1]["content"]  # the answer only, not the prompt
    with pytest.raises(
        ValueError, match="demo_preference_dataset: split='test' is not accepted; use 'train'"
    ):
        demo_preference_dataset(tokenizer, data_dir=str(tmp_path), split="test")
    with pytest.raises(
        ValueError, match=r"dataset.packed: preference_dataset .* does not pack.*set dataset.packed=false"
    ):
        demo_preference_dataset(tokenizer, data_dir=str(tmp_path), packed=True)
