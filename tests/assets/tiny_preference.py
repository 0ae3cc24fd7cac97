"""A tiny preference dataset (prompt, chosen, rejected) for the DPO recipe tests, built offline and seeded.

The prompts are the demo task's; the chosen answer is the right one, the rejected one the answer
of another question (a well-formed but wrong date), so the pairs differ in a few answer tokens.
preference.jsonl holds the training pairs, preference_val.jsonl held-out ones (other prompts).
kto.jsonl and kto_val.jsonl hold the same examples unpaired for KTO: the right answer labelled true,
another question's answer labelled false, in turn.
"""

from __future__ import annotations

import json
from pathlib import Path

from tiny_checkpoint import tiny_overrides

NUM_PAIRS = 48
NUM_VAL_PAIRS = 16
# The DPO runs that compare world size 2 with one device validate every held-out pair at steps 2 and 4
# (batch_size 4 on one device, 2 per rank: max_val_batches=null reads the same 16 pairs in both).
VAL_EVERY_2 = ("run_val_every_n_steps=2", "max_val_batches=null")


def _write_pairs(path: Path, examples: list) -> None:
    rows = [
        {"prompt": a.prompt, "chosen": a.answer, "rejected": b.answer}
        for a, b in zip(examples[:-1], examples[1:])
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_preference_data(folder: Path, n: int = NUM_PAIRS, seed: int = 7) -> Path:
    """Write `folder`/preference.jsonl and preference_val.jsonl (if absent); return the first's path."""
    from ftune.datasets.demo import generate_demo_examples

    path, val = folder / "preference.jsonl", folder / "preference_val.jsonl"
    if not (path.exists() and val.exists()):
        folder.mkdir(parents=True, exist_ok=True)
        # The first n + 1 examples do not depend on how many are generated: the training pairs are
        # those of the file before it had a held-out companion.
        examples = generate_demo_examples(n + 1 + NUM_VAL_PAIRS + 1, seed=seed)
        _write_pairs(path, examples[: n + 1])
        _write_pairs(val, examples[n + 1 :])
    return path


def tiny_preference_overrides(checkpoint: Path, data_dir: Path, output_dir: Path) -> list[str]:
    """`tiny_overrides` for a DPO config: the tiny checkpoint, and the preference files instead of the demo
    data (dataset_val: the held-out pairs; run_val_every_n_steps stays null, as in `tiny_overrides`)."""
    base = [
        o
        for o in tiny_overrides(checkpoint, data_dir, output_dir)
        if not o.startswith(("dataset.", "dataset_val."))
    ]
    train = write_preference_data(data_dir)
    return [
        *base,
        f"dataset.source={train}",
        "dataset_val._component_=ftune.datasets.preference_dataset",
        f"dataset_val.source={train.with_name('preference_val.jsonl')}",
        "dataset_val.split=train",  # a single local file is split "train"
    ]


def write_kto_data(folder: Path, n: int = NUM_PAIRS, seed: int = 7) -> Path:
    """Write `folder`/kto.jsonl and kto_val.jsonl (if absent): prompt, completion, label; return the first."""
    from ftune.datasets.demo import generate_demo_examples

    path, val = folder / "kto.jsonl", folder / "kto_val.jsonl"
    if not (path.exists() and val.exists()):
        folder.mkdir(parents=True, exist_ok=True)
        examples = generate_demo_examples(n + 1 + NUM_VAL_PAIRS + 1, seed=seed)
        for file, part in ((path, examples[: n + 1]), (val, examples[n + 1 :])):
            rows = [
                {"prompt": a.prompt, "completion": (a if i % 2 == 0 else b).answer, "label": i % 2 == 0}
                for i, (a, b) in enumerate(zip(part[:-1], part[1:]))
            ]
            file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tiny_kto_overrides(checkpoint: Path, data_dir: Path, output_dir: Path) -> list[str]:
    """`tiny_preference_overrides` for a KTO config: the unpaired files."""
    base = [o for o in tiny_preference_overrides(checkpoint, data_dir, output_dir) if "source=" not in o]
    train = write_kto_data(data_dir)
    return [
        *[o for o in base if not o.startswith("dataset_val._component_")],
        f"dataset.source={train}",
        f"dataset_val.source={train.with_name('kto_val.jsonl')}",
    ]
