"""The pure parts of benchmarks/vs_torchtune_seq.py: attention's FLOPs, the bound with and without them,
the rows, the docs' table. Nothing here creates torchtune's venv or times anything."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import vs_torchtune_seq as seq  # noqa: E402
from figures import report  # noqa: E402
from figures import sequence as figures_sequence  # noqa: E402

SMOLLM2 = {"vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
           "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "tie_word_embeddings": True}  # fmt: skip


def test_attention_flops_are_the_causal_products_and_grow_with_the_square_of_the_length():
    # 6 x layers x (heads x head_dim) x s x s: q k^T and p v over the causal half, forward and backward
    assert seq.attention_flops(SMOLLM2, 512) == 6 * 30 * 576 * 512 * 512
    assert seq.attention_flops(SMOLLM2, 8192) == 256 * seq.attention_flops(SMOLLM2, 512)


def test_the_bound_with_attention_counts_its_flops_at_the_products_rate():
    v = seq.variants_for(["full"], [2048], 3)[0]
    b = seq.bound_row(SMOLLM2, v, bound_s=10.0)
    products = 6 * 134_515_008 * 2048  # SmolLM2-135M's matrix-product weights, full fine-tune
    assert b["products_gflops"] == pytest.approx(products / 10.0 / 1e9, rel=1e-3)
    assert b["attention_at_rate_s"] == pytest.approx(
        10.0 * seq.attention_flops(SMOLLM2, 2048) / products, rel=1e-3
    )


def _run(name, tool, steps, peak=2.0, others=0.01):
    return {"variant": name, "tool": tool, "repeat": 0, "returncode": 0, "step_seconds": steps, "peak_rss_gib": peak,
            "first_step_s": 5.0, "step1_loss": 2.5, "load1_before": 1.0, "load1_after": 1.0,
            "others_cores": others, "wall_s": 60.0}  # fmt: skip


def _result(others=0.01, quick=False):
    variants = seq.variants_for(["full", "lora"], [512, 8192], 3)
    bounds = {
        v["name"]: {"bound_s": 1.0, "attention_at_rate_s": 0.5, "products_gflops": 100.0} for v in variants
    }
    runs = [_run(v["name"], tool, [2.0, 2.0 if tool == "ftune" else 4.0], others=others)
            for v in variants for tool in ("torchtune", "ftune")]  # fmt: skip
    runs[-1] = {**runs[-1], "step_seconds": [], "error": "exit code 1"}  # ftune's lora at 8192 failed
    rows = seq.summarise(runs, variants, bounds)
    return {"benchmark": "vs_torchtune_seq", "commit": "0" * 40, "date": "2026-12-05", "command": "python x",
            "machine": {}, "note": "n", "rows": rows, "runs": runs, "contended": others > 0.2 or quick,
            "quick": quick, "workload": {"steps": 3, "repeats": 1, "threads": None}}  # fmt: skip


def test_rows_take_the_steady_steps_and_both_shares_of_the_bound():
    rows = _result()["rows"]
    full = [r for r in rows if r["variant"] == "full-fp32-s512"]
    assert [(r["tool"], r["step_s"], r["tok_s"]) for r in full] == [
        ("torchtune", 3.0, 170.7),
        ("ftune", 2.0, 256.0),
    ]
    assert full[1]["bound_fraction"] == 0.5 and full[1]["bound_fraction_with_attention"] == 0.75
    assert not [r for r in rows if r["variant"] == "lora-fp32-s8192" and r["tool"] == "ftune"]


def test_docs_table_from_an_idle_run_and_no_figures_from_a_busy_or_quick_one():
    text = figures_sequence.vs_torchtune_seq(_result())
    assert "| full | 512 | 171 | 256 | 1.50x | 2.00 | 2.00 | 0.33 / 0.50 | 0.50 / 0.75 |" in text
    assert "| lora | 8192 | 2731 | - | ftune failed | 2.00 | - | 0.33 / - | 0.50 / - |" in text
    for busy in (_result(1.5), _result(quick=True)):
        text = figures_sequence.vs_torchtune_seq(busy)
        assert text.startswith("No figures yet") and "|" not in text
    assert report.BLOCKS["vs_torchtune_seq"][0] == "docs/benchmarks.md"


def test_a_run_other_processes_shared_is_left_out_of_its_row_and_named(tmp_path):
    r = _result()
    shared = next(x for x in r["runs"] if x["variant"] == "full-fp32-s512" and x["tool"] == "ftune")
    shared["others_cores"] = 0.9
    r |= {"bounds": {v["name"]: {"bound_s": 1.0, "attention_at_rate_s": 0.5, "products_gflops": 100.0}
                     for v in seq.variants_for(["full", "lora"], [512, 8192], 3)},
          "workload": {**r["workload"], "lengths": [512, 8192], "methods": ["full", "lora"]}}  # fmt: skip
    path = tmp_path / "seq.json"
    path.write_text(json.dumps(r))
    seq.resummarise(path)
    out = json.loads(path.read_text())
    assert not out["contended"] and out["left_out"] == [
        {"variant": "full-fp32-s512", "tool": "ftune", "others_cores": 0.9}
    ]
    assert not [x for x in out["rows"] if (x["variant"], x["tool"]) == ("full-fp32-s512", "ftune")]
    text = figures_sequence.vs_torchtune_seq(out)
    assert "| full | 512 | 171 | - | ftune left out: the machine was shared |" in text
    assert "Left out: ftune full-fp32-s512 (other processes used 0.90 cores during it)." in out["note"]
