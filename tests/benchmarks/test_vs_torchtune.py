"""The pure parts of benchmarks/vs_torchtune.py: FLOPs a step, step times from log lines, the results schema, the docs' table.

Nothing here creates torchtune's venv or times anything.
"""

import copy
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import vs_torchtune_configs as configs  # noqa: E402
import vs_torchtune_data  # noqa: E402
import vs_torchtune_measure as measure  # noqa: E402
from figures import report  # noqa: E402
from figures import training as figures_training  # noqa: E402

SMOLLM2 = {  # SmolLM2-135M-Instruct's config.json (the dimensions that count)
    "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
    "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "tie_word_embeddings": True,
}  # fmt: skip
TINY = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2}  # fmt: skip


@pytest.mark.parametrize("tied", [True, False])
def test_matmul_params_are_the_linear_weights_of_the_transformers_model(tied):
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**TINY, tie_word_embeddings=tied))
    # every parameter but the norms (the embedding lookup counts because, tied or not, the output projection is a matmul)
    expected = sum(p.numel() for n, p in model.named_parameters() if "norm" not in n and "embed" not in n)
    expected += model.model.embed_tokens.weight.numel() * (1 if tied else 0)
    assert measure.matmul_params({**TINY, "tie_word_embeddings": tied}) == expected


def test_smollm2_counts():
    assert (
        measure.matmul_params(SMOLLM2) == 134_479_872
    )  # 49152*576 + 30*(2*576*576 + 2*576*192 + 3*576*1536)
    tokens = 4 * 512
    attention = 6 * 30 * 576 * 512 * tokens
    assert measure.flops_per_step(SMOLLM2, "full", 4, 512) == 6 * 134_479_872 * tokens + attention
    lora = 30 * 8 * ((576 + 576) + (576 + 192))  # rank 8 on q (576 -> 576) and v (576 -> 192)
    assert measure.lora_params(SMOLLM2, 8, ["q_proj", "v_proj"]) == lora
    assert (
        measure.flops_per_step(SMOLLM2, "lora", 4, 512)
        == 4 * 134_479_872 * tokens + 6 * lora * tokens + attention
    )
    with pytest.raises(ValueError, match="'dora'"):
        measure.flops_per_step(SMOLLM2, "dora", 4, 512)


def test_lora_params_match_peft():
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**TINY, tie_word_embeddings=True))
    peft_model = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj", "o_proj"]))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert measure.lora_params(TINY, 8, ["q_proj", "v_proj", "o_proj"]) == trainable


def test_step_times_are_the_gaps_between_step_lines_of_either_tool():
    lines = [
        (0.5, "Setting manual seed to local seed 0."),
        (
            10.0,
            "1|1|Loss: 10.81: 33%|###| 1/3 [00:54<01:49]Step 1 | loss:10.812345 lr:5e-05 grad_norm:4.6 ",
        ),  # torchtune
        (12.5, "step 2 | loss 10.5 | lr 5e-05 | tokens_per_second 130"),  # ftune
        (14.0, "1|3|Loss: 10.4: 100%|####| 3/3"),  # a progress bar is not a step line
        (15.5, "step 3 | loss 1.04e+01 | lr 4e-05"),
    ]
    steps = measure.step_lines(lines)
    assert steps == [(1, 10.0, 10.812345), (2, 12.5, 10.5), (3, 15.5, 10.4)]
    assert measure.step_seconds(steps) == [2.5, 3.0]
    assert measure.steady([2.5, 3.0, 4.0], warmup=1) == [
        2.5,
        3.0,
        4.0,
    ]  # step 1 has no gap: nothing more to drop
    assert measure.steady([2.5, 3.0, 4.0], warmup=3) == [4.0]
    with pytest.raises(ValueError, match=r"got steps \[1, 3\]"):
        measure.step_lines([(1.0, "step 1 | loss 2"), (2.0, "step 3 | loss 2")])


def test_summary_is_median_and_range():
    assert measure.summary([3.0, 1.0, 2.0, 10.0]) == {"median": 2.5, "min": 1.0, "max": 10.0}
    with pytest.raises(ValueError):
        measure.summary([])


def test_pretokenized_rows_give_the_same_items_to_both_tools(tmp_path):
    (tmp_path / "rows.json").write_text(json.dumps({"rows": [[1, 2, 3], [4, 5, 6]]}))
    ds = vs_torchtune_data.pretokenized(None, path=str(tmp_path / "rows.json"))
    assert len(ds) == 2 and ds[1] == {"tokens": [4, 5, 6], "labels": [4, 5, 6]}
    with pytest.raises(ValueError, match="packed: false"):
        vs_torchtune_data.pretokenized(None, path=str(tmp_path / "rows.json"), packed=True)


@pytest.mark.parametrize("method", ["full", "lora"])
def test_both_configs_set_the_same_workload(tmp_path, method):
    hf = {**SMOLLM2, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
          "rope_scaling": None, "pad_token_id": 2}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(hf))
    kw = {"steps": 3, "batch": 2, "dtype": "fp32", "compile_": False}
    tt = configs.torchtune_config(method, tmp_path, tmp_path / "rows.json", tmp_path / "tt", **kw)
    ft = configs.ftune_config(method, tmp_path / "rows.json", tmp_path / "ft", **kw)
    assert (tt["batch_size"], tt["max_steps_per_epoch"], tt["shuffle"]) == (
        ft["batch_size"],
        ft["max_steps"],
        False,
    )
    assert ft["shuffle"] is False and tt["dataset"]["path"] == ft["dataset"]["path"]
    assert (
        tt["optimizer"]["lr"] == ft["optimizer"]["lr"] and tt["clip_grad_norm"] == ft["clip_grad_norm"] == 1.0
    )
    assert (
        tt["model"]["scale_factor"] == 1 and tt["model"]["rope_base"] == 100000
    )  # plain RoPE, SmolLM2's base
    assert isinstance(tt["model"]["norm_eps"], float)
    if method == "lora":
        assert tt["model"]["lora_attn_modules"] == ft["peft"]["targets"] == ["q_proj", "v_proj"]
        assert tt["model"]["lora_rank"] == ft["peft"]["rank"] == 8
        assert tt["model"]["lora_alpha"] == ft["peft"]["alpha"]
    with pytest.raises(ValueError, match="rope_scaling"):
        configs.torchtune_model({**hf, "rope_scaling": {"type": "llama3"}}, method)


def _gen_row(tool: str, tok_s: float) -> dict:
    return {"tool": tool, "new_tokens_per_second": tok_s, "new_tokens_per_second_range": [tok_s - 1, tok_s + 1],
            "prefill_ms": 30.0, "eval_prompts_per_second": tok_s / 10, "same_answers": "32 of 32"}  # fmt: skip


def _result(others: float, quick: bool = False) -> dict:
    rows = []
    runs = []
    for tool, tok, peak, loss in [("torchtune", 100.0, 7.0, 10.8123), ("ftune", 150.0, 4.9, 10.8125)]:
        rows.append({"variant": "full-fp32", "tool": tool, "tok_s": tok, "tok_s_min": tok - 5, "tok_s_max": tok + 5,
                     "peak_rss_gib": peak, "first_step_s": 30.0, "step1_loss": loss, "flops_per_step": 1.7e12,
                     "matmul_fraction": 0.5, "bound_fraction": tok / 200})  # fmt: skip
        runs.append({"variant": "full-fp32", "tool": tool, "repeat": 0, "returncode": 0, "step_seconds": [20.0],
                     "peak_rss_gib": peak, "first_step_s": 30.0, "step1_loss": loss, "load1_before": 1.0,
                     "load1_after": 1.0, "others_cores": others, "wall_s": 100.0})  # fmt: skip
    return {"benchmark": "vs_torchtune", "commit": "0" * 40, "date": "2026-12-01", "command": "python x",
            "machine": {}, "note": "n", "rows": rows, "runs": runs, "matmul_peak_gflops": [170.0, 180.0],
            "matmul_bound": {"full-fp32": {"tokens": 2048, "seconds": [10.4, 10.24], "tok_s": 200.0}},
            "generation": {"rows": [_gen_row("ftune", 30.0), _gen_row("transformers", 20.0)], "note": "n",
                           "same_tokens": "s", "workload": {"new_tokens": 64, "eval": {"batch": 32}}},
            "contended": others > 0.2 or quick, "quick": quick,
            "workload": {"steps": 8, "batch": 4, "seq_len": 512, "repeats": 2}}  # fmt: skip


def test_results_schema_is_checked():
    measure.check_results(_result(0.01))
    broken = copy.deepcopy(_result(0.01))
    del broken["matmul_peak_gflops"], broken["rows"][1]["step1_loss"], broken["runs"][0]["others_cores"]
    with pytest.raises(ValueError) as e:
        measure.check_results(broken)
    assert "'matmul_peak_gflops' missing" in str(e.value)
    assert "rows[1] lacks ['step1_loss']" in str(e.value) and "runs[0] lacks ['others_cores']" in str(e.value)


def test_docs_table_from_an_idle_run_and_no_figures_from_a_contended_one():
    text = figures_training.vs_torchtune(_result(0.01))
    assert "| full-fp32 | 100 [95-105] | 150 [145-155] | 1.50x | 7.00 | 4.90 | 0.70 |" in text
    assert "10.8123 / 10.8125" in text and "180 GFLOP/s" in text
    assert text.splitlines()[2].endswith("| 50% / 50% | 50% / 75% |")  # square peak, then the step's bound
    assert "full-fp32 200 tok/s" in text
    assert (
        "ftune 30.0 new tok/s [29.0-31.0] against transformers' `generate` 20.0 [19.0-21.0] (1.50x)" in text
    )
    for busy in (_result(1.5), _result(0.0, quick=True)):
        text = figures_training.vs_torchtune(busy)
        assert text.startswith("No figures yet") and "150" not in text and "|" not in text
    assert report.BLOCKS["vs_torchtune"][0] == "docs/benchmarks.md"


def test_contention_note_flags_runs_other_processes_shared_and_quick_checks():
    assert measure.contention_note([0.05, 0.1], False, "") == (False, "idle machine")
    assert measure.contention_note([0.05], False, "after a reboot") == (False, "after a reboot")
    contended, note = measure.contention_note([0.05, 0.73], False, "x")
    assert (
        contended
        and note.startswith("CONTENDED: other processes used up to 0.73 cores")
        and note.endswith(" x")
    )
    contended, note = measure.contention_note([0.0], True, "")
    assert contended and note == "--quick (plumbing check, not figures)."
