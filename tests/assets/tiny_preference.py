"""A tiny preference dataset (prompt, chosen, rejected) for the DPO recipe tests, built offline and seeded.

The prompts are the demo task's; the chosen answer is the right one, the rejected one the answer
of another question (a well-formed but wrong date), so the pairs differ in a few answer tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

from tiny_checkpoint import tiny_overrides

NUM_PAIRS = 48


def write_preference_data(folder: Path, n: int = NUM_PAIRS, seed: int = 7) -> Path:
    """Write `folder`/preference.jsonl (if absent) and return its path."""
    from ftune.datasets.demo import generate_demo_examples

    path = folder / "preference.jsonl"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        examples = generate_demo_examples(n + 1, seed=seed)
        rows = [
            {"prompt": a.prompt, "chosen": a.answer, "rejected": b.answer}
            for a, b in zip(examples[:-1], examples[1:])
        ]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tiny_preference_overrides(checkpoint: Path, data_dir: Path, output_dir: Path) -> list[str]:
    """`tiny_overrides` for a DPO config: the tiny checkpoint, and the preference file instead of the demo data."""
    base = [
        o
        for o in tiny_overrides(checkpoint, data_dir, output_dir)
        if not o.startswith(("dataset.", "dataset_val."))
    ]
    return [*base, f"dataset.source={write_preference_data(data_dir)}"]
