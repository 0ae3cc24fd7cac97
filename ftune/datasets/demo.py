"""The quickstart's demo task: date reformatting, generated offline and checked by exact match.

Each example asks to rewrite a date into a given format and to answer with the date only:

    Rewrite the date 2023-07-14 in the format DD/MM/YYYY. Answer with the date only.  -> 14/07/2023
    Rewrite the date 2023-07-14 in the format MM/DD/YYYY. Answer with the date only.  -> 07/14/2023
    Rewrite the date July 14, 2023 in the format YYYY-MM-DD. Answer with the date only. -> 2023-07-14

SmolLM2-135M-Instruct gets none of these right out of the box (it echoes the input date or
appends words: 0/45 held-out, greedy). Measured with `transformers` + `peft` on this task: LoRA
rank 8 on all linear layers, lr 1e-3, batch 8, reached 58/60 held-out exact matches after 50
steps. Prompts are 32 tokens and answers 10 with the SmolLM2 tokenizer, so training is cheap.

The same prompts also come as preference pairs, for the DPO recipes (`demo_preference_dataset`):
the right answer is chosen, and the rejected answer is a plausible wrong one, picked per prompt
among three kinds: the input date echoed unchanged (what the base model mostly answers), day and
month swapped (07/02/1999 for 02/07/1999), or the right date inside a sentence ("The date is
02/07/1999.").
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ftune.data.transforms import OpenAIToMessages
from ftune.datasets.preference import PreferenceDataset, preference_dataset
from ftune.datasets.sft import SFTDataset, build_sft

if TYPE_CHECKING:
    from ftune.data.packing import PackedDataset
    from ftune.tokenizers.base import Tokenizer

log = logging.getLogger(__name__)

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
PROMPT = "Rewrite the date {date} in the format {fmt}. Answer with the date only."
TRAIN_FILE, HELDOUT_FILE = "train.jsonl", "heldout.jsonl"
TRAIN_PREF_FILE, HELDOUT_PREF_FILE = "train_pref.jsonl", "heldout_pref.jsonl"
# The kinds of wrong answer a preference pair rejects (see `generate_demo_pairs`).
REJECTED_KINDS = ("echo", "swap", "sentence")


@dataclass(frozen=True)
class DemoExample:
    """One demo question: the user prompt and the exact expected answer."""

    prompt: str
    answer: str


def _example(task: int, year: int, month: int, day: int) -> DemoExample:
    iso = f"{year:04d}-{month:02d}-{day:02d}"
    if task == 0:
        return DemoExample(PROMPT.format(date=iso, fmt="DD/MM/YYYY"), f"{day:02d}/{month:02d}/{year:04d}")
    if task == 1:
        return DemoExample(PROMPT.format(date=iso, fmt="MM/DD/YYYY"), f"{month:02d}/{day:02d}/{year:04d}")
    words = f"{MONTHS[month - 1]} {day}, {year}"
    return DemoExample(PROMPT.format(date=words, fmt="YYYY-MM-DD"), iso)


def _keys(n: int, seed: int) -> list[tuple[int, int, int, int]]:
    """(task, year, month, day) of `n` distinct examples, deterministically from `seed`."""
    rng = random.Random(seed)
    seen: set[tuple[int, int, int, int]] = set()
    out = []
    while len(out) < n:
        key = (len(out) % 3, rng.randint(1950, 2049), rng.randint(1, 12), rng.randint(1, 28))
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def generate_demo_examples(n: int, *, seed: int = 0) -> list[DemoExample]:
    """Generate `n` distinct demo examples, deterministically from `seed`.

    Args:
        n: number of examples (at most a few hundred thousand: dates are 1950-2049, days 1-28).
        seed: seed of the generator; the same seed gives the same examples on every machine.

    Returns:
        The examples, tasks mixed in equal shares, no prompt repeated.
    """
    return [_example(*key) for key in _keys(n, seed)]


@dataclass(frozen=True)
class DemoPair:
    """One demo question as a preference pair: the right answer (chosen) and a wrong one (rejected).

    Attributes:
        prompt, chosen, rejected: the user prompt and the two answers.
        kind: what the rejected answer is, one of `REJECTED_KINDS`.
    """

    prompt: str
    chosen: str
    rejected: str
    kind: str


def _wrong(kind: str, task: int, year: int, month: int, day: int, answer: str) -> str:
    if kind == "echo":  # the input date, unchanged
        return f"{year:04d}-{month:02d}-{day:02d}" if task < 2 else f"{MONTHS[month - 1]} {day}, {year}"
    if kind == "swap":  # day and month swapped, in the asked format
        swapped = {0: f"{month:02d}/{day:02d}/{year:04d}", 1: f"{day:02d}/{month:02d}/{year:04d}"}
        return swapped.get(task, f"{year:04d}-{day:02d}-{month:02d}")
    return f"The date is {answer}."  # the right date, not alone


def _pair(task: int, year: int, month: int, day: int) -> DemoPair:
    example = _example(task, year, month, day)
    # The kind is a pure function of the prompt (not of its position or of n); a swap that
    # changes nothing (day == month) gives way to the next kind.
    first = zlib.crc32(example.prompt.encode()) % len(REJECTED_KINDS)
    for kind in REJECTED_KINDS[first:] + REJECTED_KINDS[:first]:
        if kind != "swap" or day != month:
            rejected = _wrong(kind, task, year, month, day, example.answer)
            return DemoPair(example.prompt, example.answer, rejected, kind)
    raise AssertionError("unreachable: only 'swap' is ever skipped")


def generate_demo_pairs(n: int, *, seed: int = 0) -> list[DemoPair]:
    """The first `n` demo examples of `seed` (those of `generate_demo_examples`) as preference pairs.

    Args:
        n: number of pairs.
        seed: generator seed, as for `generate_demo_examples`.

    Returns:
        The pairs, in the order of the examples; each rejected kind in about a third of them.
    """
    return [_pair(*key) for key in _keys(n, seed)]


def _write_records(path: Path, records: Iterable[dict]) -> None:
    """One JSON record a line, written to a temporary file first, then moved into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    os.replace(tmp, path)


def _write_jsonl(path: Path, examples: list[DemoExample]) -> None:
    _write_records(
        path,
        (
            {
                "messages": [
                    {"role": "user", "content": ex.prompt},
                    {"role": "assistant", "content": ex.answer},
                ]
            }
            for ex in examples
        ),
    )


def _pair_record(pair: DemoPair) -> dict:
    user = {"role": "user", "content": pair.prompt}
    return {
        "chosen": [user, {"role": "assistant", "content": pair.chosen}],
        "rejected": [user, {"role": "assistant", "content": pair.rejected}],
        "rejected_kind": pair.kind,
    }


def _write_pairs_jsonl(path: Path, pairs: list[DemoPair]) -> None:
    _write_records(path, (_pair_record(pair) for pair in pairs))


def write_demo_preference_data(
    out_dir: str | os.PathLike, *, n_train: int = 2000, n_heldout: int = 100, seed: int = 0
) -> tuple[Path, Path]:
    """Write the demo task as preference pairs: train_pref.jsonl and heldout_pref.jsonl.

    The prompts are those of train.jsonl and heldout.jsonl for the same arguments, line for line,
    so the held-out prompts never occur in training. Each record holds two conversations,
    ``{"chosen": [user, assistant], "rejected": [user, assistant], "rejected_kind": ...}``, the
    layout `ftune.datasets.preference_dataset` reads. train.jsonl and heldout.jsonl are not touched.

    Args:
        out_dir: folder to write into (created if missing).
        n_train: number of training pairs.
        n_heldout: number of held-out pairs.
        seed: generator seed.

    Returns:
        (path of train_pref.jsonl, path of heldout_pref.jsonl).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pairs = generate_demo_pairs(n_heldout + n_train, seed=seed)  # held-out first, as in write_demo_data
    train, heldout = out / TRAIN_PREF_FILE, out / HELDOUT_PREF_FILE
    _write_pairs_jsonl(heldout, pairs[:n_heldout])
    _write_pairs_jsonl(train, pairs[n_heldout:])
    log.info("wrote %d train and %d held-out demo preference pairs to %s", n_train, n_heldout, out)
    return train, heldout


def write_demo_data(
    out_dir: str | os.PathLike, *, n_train: int = 2000, n_heldout: int = 100, seed: int = 0
) -> tuple[Path, Path]:
    """Write the demo task as OpenAI-style `messages` records: train.jsonl and heldout.jsonl.

    The held-out prompts never occur in the training file. The same prompts as preference pairs
    go to train_pref.jsonl and heldout_pref.jsonl (`write_demo_preference_data`).

    Args:
        out_dir: folder to write into (created if missing).
        n_train: number of training examples.
        n_heldout: number of held-out examples.
        seed: generator seed.

    Returns:
        (path of train.jsonl, path of heldout.jsonl).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # held-out first, so that its examples do not change when n_train changes
    examples = generate_demo_examples(n_heldout + n_train, seed=seed)
    train, heldout = out / TRAIN_FILE, out / HELDOUT_FILE
    _write_jsonl(heldout, examples[:n_heldout])
    _write_jsonl(train, examples[n_heldout:])
    log.info("wrote %d train and %d held-out demo examples to %s", n_train, n_heldout, out)
    write_demo_preference_data(out, n_train=n_train, n_heldout=n_heldout, seed=seed)
    return train, heldout


def read_demo_examples(path: str | os.PathLike) -> list[DemoExample]:
    """Read a demo jsonl file back as (prompt, answer) pairs, e.g. to score held-out generations.

    Args:
        path: a train.jsonl or heldout.jsonl written by `write_demo_data`.

    Returns:
        The examples in file order.
    """
    examples = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                user, assistant = json.loads(line)["messages"]
                examples.append(DemoExample(user["content"], assistant["content"]))
    return examples


def exact_match(prediction: str, reference: str) -> bool:
    """True when `prediction` equals `reference` up to surrounding and repeated whitespace.

    Args:
        prediction: the model's generated answer.
        reference: the expected answer.
    """
    return re.sub(r"\s+", " ", prediction).strip() == re.sub(r"\s+", " ", reference).strip()


def demo_dataset(
    tokenizer: Tokenizer,
    *,
    data_dir: str,
    split: Literal["train", "heldout"] = "train",
    train_on_input: bool = False,
    packed: bool = False,
    max_seq_len: int | None = None,
    n_train: int = 2000,
    n_heldout: int = 100,
    seed: int = 0,
) -> SFTDataset | PackedDataset:
    """The demo task as a dataset component; writes the data first if `data_dir` has none.

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        data_dir: folder holding train.jsonl and heldout.jsonl (see `write_demo_data`).
        split: "train" or "heldout".
        train_on_input: train on the prompt tokens too (default: only the answer).
        packed: pack samples into rows of `max_seq_len` tokens.
        max_seq_len: truncate samples (and the pack length when packed).
        n_train: training examples to generate when the files are missing.
        n_heldout: held-out examples to generate when the files are missing.
        seed: generator seed when the files are missing.

    Returns:
        A dataset of {"tokens", "labels"} items (packed items when `packed=True`).

    Raises:
        ValueError: `split` is not "train" or "heldout".
    """
    files = {"train": TRAIN_FILE, "heldout": HELDOUT_FILE}
    if split not in files:
        raise ValueError(f"demo_dataset: split={split!r} is not accepted; use 'train' or 'heldout'.")
    path = Path(data_dir) / files[split]
    if not path.is_file():
        write_demo_data(data_dir, n_train=n_train, n_heldout=n_heldout, seed=seed)
    return build_sft(
        tokenizer,
        OpenAIToMessages(train_on_input=train_on_input),
        source=str(path),
        packed=packed,
        max_seq_len=max_seq_len,
    )


def demo_preference_dataset(
    tokenizer: Tokenizer,
    *,
    data_dir: str,
    split: Literal["train", "heldout"] = "train",
    train_on_input: bool = False,
    packed: bool = False,
    max_seq_len: int | None = None,
    n_train: int = 2000,
    n_heldout: int = 100,
    seed: int = 0,
) -> PreferenceDataset:
    """The demo task as preference pairs (for the DPO recipes); writes them first if `data_dir` has none.

    Args:
        tokenizer: the model's tokenizer (passed positionally by the recipe).
        data_dir: folder holding train_pref.jsonl and heldout_pref.jsonl (see `write_demo_preference_data`).
        split: "train" or "heldout".
        train_on_input: score the prompt tokens too (default: only the answers).
        packed: must be false: preference pairs are not packed (refused with a message).
        max_seq_len: truncate both answers' rows to this length.
        n_train: training pairs to generate when the files are missing.
        n_heldout: held-out pairs to generate when the files are missing.
        seed: generator seed when the files are missing.

    Returns:
        A `PreferenceDataset` (collate with `ftune.data.padded_collate_preference`).

    Raises:
        ValueError: `split` is not "train" or "heldout", or `packed` is true.
    """
    files = {"train": TRAIN_PREF_FILE, "heldout": HELDOUT_PREF_FILE}
    if split not in files:
        raise ValueError(
            f"demo_preference_dataset: split={split!r} is not accepted; use 'train' or 'heldout'."
        )
    path = Path(data_dir) / files[split]
    if not path.is_file() and not packed:
        write_demo_preference_data(data_dir, n_train=n_train, n_heldout=n_heldout, seed=seed)
    return preference_dataset(
        tokenizer, source=str(path), train_on_input=train_on_input, max_seq_len=max_seq_len, packed=packed
    )
