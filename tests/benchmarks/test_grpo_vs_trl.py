"""The pure parts of benchmarks/grpo_vs_trl.py: completion lengths, per-step timings from each tool's
records, the medians of the results file, and the docs' tables made from them.

Nothing here loads a model, runs TRL or times anything.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import grpo_vs_trl as bench  # noqa: E402
from figures import methods as figures_methods  # noqa: E402
from figures import report  # noqa: E402


def test_completion_lengths_count_up_to_and_including_the_first_stop():
    rows = [[5, 6, 2, 2, 2], [5, 6, 7, 8, 9], [2, 0, 0, 0, 0]]
    assert bench.completion_lengths(rows, {2}) == [3, 5, 1]
    assert bench.completion_lengths(rows, set()) == [5, 5, 5]  # no stop token: every row runs to the end


def ftune_log(step: int, seconds: float, rollout: float) -> dict:
    return {"step": step, "loss": 0.1, "step_seconds": seconds, "time/rollout_s": rollout,
            "completions/mean_length": 12.0, "reward": 0.25}  # fmt: skip


def test_ftune_steps_pair_each_logged_step_with_its_rollout_timer():
    logs = [ftune_log(1, 9.0, 5.0), {"step": 1, "val_loss": 1.0}, ftune_log(2, 4.0, 2.5)]
    steps = bench.ftune_steps(logs, [4.0, 2.0])
    assert steps == [
        {
            "step": 1,
            "step_s": 9.0,
            "rollout_s": 5.0,
            "generation_s": 4.0,
            "mean_length": 12.0,
            "reward": 0.25,
        },
        {
            "step": 2,
            "step_s": 4.0,
            "rollout_s": 2.5,
            "generation_s": 2.0,
            "mean_length": 12.0,
            "reward": 0.25,
        },
    ]
    with pytest.raises(ValueError, match="2 logged steps but 3 rollouts sampled"):
        bench.ftune_steps(logs, [4.0, 2.0, 1.0])


def test_trl_steps_time_each_step_from_the_previous_steps_end():
    logs = [{"loss": 0.0, "completions/mean_length": 10.0, "reward": 0.5}] * 2 + [{"train_runtime": 9.0}]
    steps = bench.trl_steps(ends=[15.0, 21.0], begins=[11.0, 15.5], generation=[2.0, 3.0], rollout=[3.0, 4.0],
                            logs=logs, start=10.0)  # fmt: skip
    assert [s["step_s"] for s in steps] == [5.0, 6.0]  # 15 - 10, 21 - 15: as ftune's step_seconds
    assert [s["callback_s"] for s in steps] == [4.0, 5.5]
    assert [(s["generation_s"], s["rollout_s"]) for s in steps] == [(2.0, 3.0), (3.0, 4.0)]
    with pytest.raises(ValueError, match="TRL timed 2 step ends, 2 begins, 1 generations"):
        bench.trl_steps([15.0, 21.0], [11.0, 15.5], [2.0], [3.0, 4.0], logs, 10.0)


def step(step_s: float, rollout_s: float, generation_s: float, length: float = 16.0) -> dict:
    return {"step": 0, "step_s": step_s, "rollout_s": rollout_s, "generation_s": generation_s,
            "mean_length": length, "reward": 0.0}  # fmt: skip


def test_step_row_skips_each_runs_warm_up_step_and_splits_the_time():
    runs = [
        [step(100.0, 90.0, 80.0), step(10.0, 6.0, 4.0), step(12.0, 7.0, 5.0)],
        [step(100.0, 90.0, 80.0), step(14.0, 8.0, 4.0), step(11.0, 6.0, 4.0)],
    ]
    row = bench.step_row("ftune", runs)
    assert row["steps_measured"] == 4
    assert row["step_seconds"] == 11.5  # median of 10, 12, 14, 11: the 100 s warm-up steps are out
    assert row["rollout_seconds"] == 6.5
    assert row["generation_seconds"] == 4.0
    assert row["update_seconds"] == 5.0  # median of 4, 5, 6, 5
    assert row["scoring_and_reference_seconds"] == 2.0  # median of 2, 2, 4, 2
    assert row["generation_tokens_per_second"] == 128.0  # 16 tokens x 32 completions / 4 s
    assert row["run_step_seconds"] == [11.0, 12.5]
    with pytest.raises(ValueError, match="no measured value"):
        bench.step_row("ftune", [[step(1.0, 1.0, 1.0)]])  # only a warm-up step


def test_rollout_row_counts_tokens_a_second_and_a_completion():
    calls = [
        {"seconds": 2.0, "tokens": 400},
        {"seconds": 4.0, "tokens": 480},
        {"seconds": 1.0, "tokens": 320},
    ]
    row = bench.rollout_row("ftune", True, calls)
    assert row["tokens_per_second"] == 200.0  # median of 200, 120, 320
    assert row["seconds_per_rollout"] == 2.0
    assert row["seconds_range"] == [1.0, 4.0]
    assert row["mean_completion_tokens"] == 12.5  # 400 tokens / 32 completions on average


def test_the_docs_block_reads_the_rows_the_script_writes(monkeypatch):
    rolls = [
        {"part": "rollout", **bench.rollout_row(tool, stop, [{"seconds": s, "tokens": 512}])}
        for tool, s in (("ftune", 2.0), ("transformers", 4.0))
        for stop in (True, False)
    ]
    runs = [[step(9.0, 9.0, 9.0), step(8.0, 5.0, 4.0)]]
    steps = [{"part": "step", **bench.step_row("ftune", runs), "max_rss_mib": 2048},
             {"part": "step", **bench.step_row("TRL", [[step(9.0, 9.0, 9.0), step(16.0, 10.0, 8.0)]]),
              "max_rss_mib": 4096}]  # fmt: skip
    result = {
        "commit": "a" * 40, "date": "2026-12-03", "machine": {"cpu": "Some CPU", "torch": "2.13.0+cpu"},
        "note": "transformers x, trl y", "load_average_1min": [0.5, 2.0], "rows": rolls + steps,
        "workload": {"repeats": 1, "steps_per_run": 2, "same_prompt_tokens": True},
    }  # fmt: skip
    monkeypatch.setattr(figures_methods, "load", lambda name: result)
    monkeypatch.setattr("figures.common.load", lambda name: result)
    text = figures_methods.grpo_vs_trl()
    assert (
        "| stop at `<|im_end|>` (the recipe's setting) | 256.0 | 128.0 | 2.00x | 2.00 | 4.00 | 16.0 / 16.0 |"
        in text
    )
    assert "| step (end to end) | 8.00 | 16.00 | 0.50 |" in text
    assert "| update (step - rollout: policy forward, loss, backward, AdamW) | 3.00 | 6.00 | 0.50 |" in text
    assert "| peak RSS of the process, GiB | 2.00 | 4.00 | 0.50 |" in text
    assert "Prompt token ids identical in both tools: yes." in text
    assert text.endswith("Some CPU, torch 2.13.0+cpu, commit aaaaaaa, 2026-12-03.")
    assert report.BLOCKS["grpo_vs_trl"][0] == "docs/benchmarks.md"
