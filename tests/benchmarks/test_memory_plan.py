"""The memory plan against the measured peaks of benchmarks/results/memory_plan.json (no run here: the file's).

Every row is within the bound, the runs cover the methods, sizes, sequence lengths and world sizes the
plan claims, and today's plan of each row's recipe, config and overrides is still the prediction the
file records (a change to ftune/planning must rerun `python benchmarks/memory_plan.py --repredict`).
"""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import memory_plan  # noqa: E402

BOUND = 0.15
ROWS = json.loads(memory_plan.RESULTS.read_text())["rows"]


def test_every_run_is_within_the_bound():
    far = {
        r["run"]: f"{r['error']:+.1%}"
        for r in ROWS
        if abs(r["predicted_gib"] / r["measured_gib"] - 1) > BOUND
    }
    assert not far, f"the plan is more than {BOUND:.0%} off the measured peak: {far}"


def test_the_runs_cover_methods_sizes_lengths_and_world_sizes():
    assert len(ROWS) >= 10
    recipes = " ".join(r["recipe"] for r in ROWS)
    for method in ("full_finetune", "lora_finetune", "dpo", "knowledge_distillation", "grpo"):
        assert method in recipes, method
    assert {r["world_size"] for r in ROWS} >= {1, 2}
    assert len({r["layers"] for r in ROWS}) >= 2
    lengths = {o for r in ROWS for o in r["overrides"] if o.startswith("tokenizer.max_seq_len=")}
    assert len(lengths) >= 3, lengths


@pytest.mark.parametrize("row", ROWS, ids=[r["run"] for r in ROWS])
def test_the_recorded_prediction_is_todays_plan(row):
    assert row["overrides"] == memory_plan.overrides_of(row["run"])
    assert memory_plan.predict(row["run"])["predicted_gib"] == pytest.approx(row["predicted_gib"], abs=0.002)


def test_the_longest_runs_complete_within_the_plan():
    longest = max(
        int(o.split("=")[1]) for r in ROWS for o in r["overrides"] if o.startswith("tokenizer.max_seq_len=")
    )
    runs = [r for r in ROWS if f"tokenizer.max_seq_len={longest}" in r["overrides"]]
    assert longest == 8192 and len(runs) >= 2
    over = {
        r["run"]: (r["measured_gib"], r["predicted_gib"])
        for r in runs
        if r["measured_gib"] > r["predicted_gib"]
    }
    assert not over, f"at {longest} tokens the step peaked above the plan (measured, planned GiB): {over}"
