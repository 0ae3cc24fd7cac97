import datetime
import json
import re

import pytest

from ftune.data import CROSS_ENTROPY_IGNORE_IDX
from ftune.datasets.demo import (
    MONTHS,
    demo_dataset,
    exact_match,
    generate_demo_examples,
    read_demo_examples,
    write_demo_data,
)


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
