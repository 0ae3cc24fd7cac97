"""Sentences of prose that carry measured figures, rendered from benchmarks/results/*.json.

Each function is one generated block of a page (see report.py's BLOCKS): the prose around a figure
is written here once, and the figure comes from the results file, so a rerun updates the sentence.
"""

from __future__ import annotations

from figures.common import load, minutes, provenance, span, table, throughput_row
from figures.pages import recovered


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _pct_span(values: list[float]) -> str:
    """Percentages (already x100) as `12-18%`, or `6%` when they round alike."""
    return span(values, ".0f") + "%"


def compile_memory() -> str:
    rows = {(r["method"], r["compile"]): r for r in load("train_throughput")["rows"] if r["dtype"] == "fp32"}
    fall = [
        1 - rows[(m, "on")]["bare_peak_gib"] / rows[(m, "off")]["bare_peak_gib"] for m in ("full", "lora")
    ]
    ours = [rows[(m, "on")]["ftune_peak_gib"] for m in ("full", "lora")]
    bare = [rows[(m, "on")]["bare_peak_gib"] for m in ("full", "lora")]
    return (
        f"With compile, the bare loop's own memory falls by {_pct_span([100 * f for f in fall])} in fp32 (inductor "
        "recomputes element-wise work instead of saving it), so the margin ftune's hand-written savings give in "
        f"eager mode shrinks; ftune's compiled runs peak at {ours[0]:.2f} GiB (full) and {ours[1]:.2f} GiB (LoRA) "
        f"against the bare loop's {bare[0]:.2f} and {bare[1]:.2f}. " + provenance("train_throughput")
    )


def variants_notes() -> str:
    (qlora,) = [
        r
        for r in load("train_throughput_variants")["rows"]
        if r["method"] == "qlora" and r["dtype"] == "fp32"
    ]
    lora = throughput_row("lora", "fp32", "off")
    return (
        "QLoRA dequantizes every NF4 weight for each matmul, forward and backward: on CPU it runs at "
        f"{qlora['ftune_tok_s'] / lora['ftune_tok_s']:.2f}x LoRA's tokens/s ({qlora['ftune_tok_s']} against "
        f"{lora['ftune_tok_s']}, the tables above)."
    )


def distributed_notes() -> str:
    rows = {r["single_method"]: r for r in load("train_throughput_distributed")["rows"]}
    single = {m: throughput_row(m, "fp32", "off") for m in rows}
    speed = [rows[m]["tok_s"] / single[m]["ftune_tok_s"] for m in rows]
    return (
        "Each rank holds half of the parameters, gradients and optimizer state: rank 0 peaks at "
        f"{rows['full']['peak_gib_rank0']:.2f} GiB against {single['full']['ftune_peak_gib']:.2f} on one device (full) "
        f"and {rows['lora']['peak_gib_rank0']:.2f} against {single['lora']['ftune_peak_gib']:.2f} (LoRA); both ranks "
        "together use more than one process, each with its own copy of PyTorch and of the layer being gathered. The "
        "two ranks share the two cores (one thread each, against one process with two threads), and run at "
        f"{span(speed, unit='x')} the single device's tokens/s, communication included: on one machine this is for "
        "testing a set-up; the speed-up is for several machines or GPUs."
    )


def _ablation(setting: str) -> dict[str, dict]:
    return {r["variant"]: r for r in load("step_ablation")["rows"] if r["setting"] == setting}


def ablation_summary() -> str:
    def gain(setting: str, variant: str) -> float:
        a = _ablation(setting)
        return 100 * (a[variant]["s_per_step"] / a["all on"]["s_per_step"] - 1)

    settings = tuple(dict.fromkeys(r["setting"] for r in load("step_ablation")["rows"]))
    labels = {
        "without label_selection": "label selection",
        "without blocked_attention": "block-skipping attention",
    }
    each = [f"without {label}, {span([gain(s, v) for s in settings], '.0f')}%" for v, label in labels.items()]
    lean = [
        100 * (1 - _ablation(s)["all on"]["saved_activations_mib"]
               / _ablation(s)["without lean_backward"]["saved_activations_mib"])
        for s in settings
    ]  # fmt: skip
    lean_time = [
        round(-gain(s, "without lean_backward")) + 0.0 for s in settings
    ]  # > 0: it costs time; no -0
    merged = gain("LoRA, fp32", "without lora_merged_weight")
    return (
        f"A step takes longer {'; '.join(each)} (full and LoRA); the lean backward saves {_pct_span(lean)} of the "
        f"activation memory for {span(lean_time, '.0f')}% more step time (in-process noise is a few percent); "
        f"without the merged-weight path a LoRA step takes {merged:.0f}% longer. "
        + provenance("step_ablation")
    )


def why_lora() -> str:
    prof = {r["method"]: r for r in load("step_profile")["rows"]}
    full, lora = prof["full"], prof["lora"]

    def part(row: dict, share: str) -> float:
        return row["profiled_step_s"] * row["shares"][share]

    mm = {m: part(r, "matmul") for m, r in prof.items()}
    rest = {m: r["profiled_step_s"] - mm[m] for m, r in prof.items()}
    wide = [
        throughput_row("lora", "fp32", c)["ftune_tok_s"] / throughput_row("full", "fp32", c)["ftune_tok_s"]
        for c in ("off", "on")
    ]
    rank = load("step_profile")["workload"]["lora"]
    return (
        f"- With vs_torchtune's LoRA (rank {rank['rank']} on {' and '.join(rank['targets'])}; the profile above), a LoRA "
        f"step takes {lora['step_s']:.1f} s against {full['step_s']:.1f} s: {full['step_s'] / lora['step_s']:.2f}x. "
        f"Its matrix products are {full['flops_per_step'] / lora['flops_per_step']:.2f}x fewer FLOPs (no weight "
        f"gradients for the frozen linears) and take {mm['lora']:.1f} s against {mm['full']:.1f} s of the profiled "
        f"steps, at {lora['matmul_gflop_s']:.0f} against {full['matmul_gflop_s']:.0f} GFLOP/s; everything else takes "
        f"{rest['lora']:.1f} s against {rest['full']:.1f} s (the full step's optimizer and clipping: "
        f"{part(full, 'optimizer'):.1f} s).\n"
        f"- With the shipped smollm2/135M_lora config (rank 16 on all seven linears of every layer; the tables "
        f"above), LoRA is {span(wide, unit='x')} the full fine-tune's tokens/s: its adapters add skinny GEMMs "
        "(rank 16 wide) and their gradients on every linear, not on two.\n\n"
        "So LoRA's gain is the matrix products it removes (the weight gradients of the frozen linears, a third of "
        "their work), with the optimizer step and gradient buffers of those weights, less what its adapters add. "
        + provenance("step_profile", "train_throughput")
    )


def optimizer_state() -> str:
    r = load("optimizer_state_memory")
    rows = {row["optimizer"]: row for row in r["rows"]}
    ref = rows["torch.optim.AdamW"]
    body = table(
        ["optimizer (`optimizer._component_`)", "state MiB", "bytes / parameter", "vs fp32 AdamW"],
        [
            [row["label"], f"{row['state_mib']:.1f}", f"{row['bytes_per_param']:.3f}",
             f"{row['state_mib'] / ref['state_mib']:.3f}"]
            for row in r["rows"]
        ],
        "lrrr",
    )  # fmt: skip
    total = {k: 8 + row["bytes_per_param"] for k, row in rows.items()}  # fp32 weights + fp32 gradients
    b8, b4 = total["torchao.optim.AdamW8bit"], total["torchao.optim.AdamW4bit"]
    gib = {k: v * r["parameters"] / 2**30 for k, v in total.items()}
    gib8b = {k: v * 8e9 / 2**30 for k, v in total.items()}
    ref_total = total["torch.optim.AdamW"]
    return (
        body + "\n\nSo a full fine-tune's weights + gradients + optimizer state fall from "
        f"{ref_total:.0f} bytes a parameter (fp32 weights, fp32 gradients, fp32 AdamW) to {b8:.1f} with "
        f"AdamW8bit and {b4:.1f} with AdamW4bit: {gib['torch.optim.AdamW']:.2f} GiB to "
        f"{gib['torchao.optim.AdamW8bit']:.2f} and {gib['torchao.optim.AdamW4bit']:.2f} GiB for SmolLM2-135M, "
        f"about {gib8b['torch.optim.AdamW']:.0f} GiB to {gib8b['torchao.optim.AdamW8bit']:.0f} and "
        f"{gib8b['torchao.optim.AdamW4bit']:.0f} GiB for an 8B model (arithmetic on the bytes a parameter). "
        "torchao keeps tensors under 4096 elements (norms, biases) in fp32, hence the "
        f"{rows['torchao.optim.AdamW8bit']['bytes_per_param'] - 2:.3f} and "
        f"{rows['torchao.optim.AdamW4bit']['bytes_per_param'] - 1:.3f} above 2 and 1. On CPU, torchao compiles its per-parameter step once per parameter shape (about "
        f"{r['compile_seconds_per_shape']} s each on these 2 cores), so the first step of a run is slow; "
        "`AdamWBf16State` needs no compile. " + provenance("optimizer_state_memory")
    )


def readme_tests() -> str:
    t = load("test_suite")["rows"][0]
    return (
        "**Tests** (sets up `.venv` if needed, then ruff and the whole default suite on tiny seeded models; "
        f"at commit {load('test_suite')['commit'][:7]} a clean-clone CI run of its {t['tests']} tests on two "
        "pytest-xdist workers, set-up "
        f"included, took {minutes(t['total_seconds'])} on an idle 2-core machine, {minutes(t['tests_seconds'])} "
        "of it tests; `-m slow` adds torch.compile with the inductor backend and the real SmolLM2 GGUF, `-m matrix` "
        "every feature check at world size 2 and every mutant, `-m gemma3_gguf` the real Gemma 3 270M file). "
        + provenance("test_suite", up="")
    )


def gemma3_conversion() -> str:
    (g,) = load("gguf_conversion")["rows"]
    return (
        f"The conversion takes about {g['conversion_seconds']} s on this machine's 2 shared cores. "
        + provenance("gguf_conversion")
    )


def _qat(model: str, seed: str) -> dict:
    (row,) = [r for r in load("qat_experiment")["rows"] if r["model"] == model and r["seed"] == seed]
    return row


def qat_ptq_cost() -> str:
    base, ptq = _qat("base, float", "-"), _qat("base, PTQ 8da4w", "-")
    return (
        "Quantizing a model after training (post-training quantization, PTQ) costs quality: 8da4w (int8 "
        "dynamic per-token activations, int4 symmetric weights in groups of 32) raises SmolLM2-135M's word "
        f"perplexity on our held-out text by {_pct(ptq['word_ppl'] / base['word_ppl'] - 1)} "
        f"({base['word_ppl']:.1f} to {ptq['word_ppl']:.1f}, [the results](#results)). QAT trains the model "
        "with that quantization simulated in every forward pass, so that the weights it learns survive being "
        "quantized for real."
    )


def qat_summary() -> str:
    seeds = sorted({r["seed"] for r in load("qat_experiment")["rows"]} - {"-"})
    rec = {s: recovered(s) for s in seeds}
    word = [rec[s]["word_ppl"] for s in seeds]
    bpb = [rec[s]["bits_per_byte"] for s in seeds]
    mean_word, mean_bpb = sum(word) / len(word), sum(bpb) / len(bpb)
    s0 = seeds[0]
    full, qat = _qat("full FT, float", s0), _qat("QAT FT, float", s0)
    conv, base, ptq = (
        _qat("QAT FT, converted 8da4w", s0),
        _qat("base, float", "-"),
        _qat("full FT, PTQ 8da4w", s0),
    )
    gap = load("qat_experiment")["loss_gap"]
    return (
        f"**QAT recovers {_pct(mean_word)} of the word-perplexity increase that PTQ causes here** "
        f"({' and '.join(f'{w:.1%}' for w in sorted(word))} for the {len(seeds)} seeds; {_pct(mean_bpb)} in bits "
        "per byte; torchao: ~68% on Llama-3-8B). Other things the table shows:\n\n"
        f"- The QAT model is worse in float than the plain fine-tune ({qat['word_ppl']:.1f} against "
        f"{full['word_ppl']:.1f} word ppl, seed {s0}): it learned weights for the quantized forward, not the "
        "float one. Deploy it quantized.\n"
        f"- After 20 QAT steps the converted int4 model is about as good as the float base model was "
        f"({conv['word_ppl']:.1f} against {base['word_ppl']:.1f}), while PTQ of the plain fine-tune loses more "
        f"than fine-tuning gained ({ptq['word_ppl']:.1f}).\n"
        f"- The training losses show the same: at step 1, on the same batch, fake quantization costs "
        f"{gap['step1_gap']['0']:.2f} nats ({gap['step1_loss']['qat']:.2f} against {gap['step1_loss']['full']:.2f}, "
        f"seed 0; {gap['step1_gap']['1']:.2f} for seed 1). The gap falls to {gap['steps_2_to_5'][0]:.2f} to "
        f"{gap['steps_2_to_5'][1]:.2f} within 5 steps and then stays between {gap['after_step_5'][0]:.2f} and "
        f"{gap['after_step_5'][1]:.2f} nats ({gap['step20']:.2f} at step 20) while the cosine schedule lowers "
        "the learning rate.\n"
        f"- Bits per byte recover less than word perplexity ({_pct(mean_bpb)} against {_pct(mean_word)}). Bits "
        "per byte are linear in the held-out log-likelihood, so their recovered fraction is the share of the "
        "lost log-likelihood that QAT wins back. Perplexities are exponentials of it, which stretch the larger "
        "losses, word perplexity most (it divides by the fewest units); the ranking of the models is the same "
        "in every metric."
    )


def qat_time() -> str:
    r = load("qat_experiment")
    total = r["total_seconds"]
    rows = [[t["step"], t["seed0"], t["seed1"]] for t in r["timing"]]
    rows.append(["total", *(f"{total[s]} ({total[s] / 60:.1f} min)" for s in ("0", "1"))])
    tok, peak = r["training"]["tok_s"], r["training"]["peak_gib_per_rank"]
    return (
        "Wall time of each step (seconds), with the 1-minute load average before -> after it; "
        f"{r['load_average']}:\n\n"
        + table(["step", "seed 0 (with base rows)", "seed 1"], rows, "lll")
        + f"\n\nTraining ran at a median of {tok['0']['full']} (full) and {tok['0']['qat']} (QAT) tokens/s for "
        f"seed 0, {tok['1']['full']} and {tok['1']['qat']} for seed 1 (all ranks together). Peak memory, as the "
        f"recipes log it, was {peak['full']:.1f} GiB per rank for the full fine-tune and {peak['qat']:.1f} GiB "
        "for QAT. " + provenance("qat_experiment")
    )
