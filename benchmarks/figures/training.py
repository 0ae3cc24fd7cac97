"""The figures of docs/benchmarks.md and of the training recipes' pages, rendered from benchmarks/results/*.json."""

from __future__ import annotations

from collections.abc import Callable

from figures.common import load, provenance, span, table, throughput_row


def throughput() -> str:
    rows = [
        [
            r["method"],
            r["dtype"],
            r["compile"],
            r["bare_tok_s"],
            r["ftune_tok_s"],
            f"{r['ftune_tok_s'] / r['bare_tok_s']:.2f}x",
            f"{r['bare_peak_gib']:.2f}",
            f"{r['ftune_peak_gib']:.2f}",
            f"{r['ftune_peak_gib'] / r['bare_peak_gib']:.2f}",
        ]
        for r in load("train_throughput")["rows"]
    ]
    header = ["method", "dtype", "compile", "bare tok/s", "ftune tok/s", "ftune / bare"]
    header += ["bare peak GiB", "ftune peak GiB", "ftune / bare"]
    return table(header, rows, "lllrrrrrr") + "\n\n" + provenance("train_throughput")


def throughput_run() -> str:
    r = load("train_throughput")
    wall = f" in {r['wall_minutes']} minutes" if "wall_minutes" in r else ""
    return (
        f"`{r['command']}`, one invocation, {2 * len(r['rows'])} runs (bare and ftune){wall}. tok/s = 2048 / the "
        "median step time; peak = the process's peak RSS in GiB."
    )


def dtypes() -> list[str]:
    """The dtypes the throughput table has rows for (bf16 only where the machine has native bf16)."""
    return list(dict.fromkeys(r["dtype"] for r in load("train_throughput")["rows"]))


def lora_over_full() -> str:
    rows = []
    for dtype in dtypes():
        for c in ("off", "on"):
            lora, full = throughput_row("lora", dtype, c), throughput_row("full", dtype, c)
            rows.append(
                [
                    dtype,
                    c,
                    f"{lora['ftune_tok_s'] / full['ftune_tok_s']:.2f}x",
                    f"{lora['bare_tok_s'] / full['bare_tok_s']:.2f}x",
                ]
            )
    header = ["dtype", "compile", "ftune LoRA / ftune full", "bare LoRA / bare full"]
    return table(header, rows, "llrr")


VARIANT_NAMES = {"qlora": "QLoRA", "dora": "DoRA"}


def variant_rows() -> dict[str, dict]:
    """The QLoRA and DoRA rows by display name (fp32: the dtype every machine measures)."""
    rows = load("train_throughput_variants")["rows"]
    return {VARIANT_NAMES[r["method"]]: r for r in rows if r["dtype"] == "fp32"}


def variants() -> str:
    rows = []
    for r in load("train_throughput_variants")["rows"]:
        lora = throughput_row("lora", r["dtype"], "off")
        same = f"{lora['ftune_tok_s']} tok/s, {lora['ftune_peak_gib']:.2f} GiB"
        rows.append(
            [VARIANT_NAMES[r["method"]], r["dtype"], r["ftune_tok_s"], f"{r['ftune_peak_gib']:.2f}", same]
        )
    header = ["method", "dtype", "ftune tok/s", "ftune peak GiB", "LoRA, same dtype, table above"]
    return table(header, rows, "llrrl") + "\n\n" + provenance("train_throughput_variants")


def distributed() -> str:
    rows = []
    for r in load("train_throughput_distributed")["rows"]:
        single = throughput_row(r["single_method"], "fp32", "off")
        same = f"{single['ftune_tok_s']} tok/s, {single['ftune_peak_gib']:.2f} GiB"
        rows.append([r["recipe"], r["world_size"], r["tok_s"], f"{r['peak_gib_rank0']:.2f}", same])
    header = ["recipe", "world size", "tok/s (global)", "peak GiB, rank 0", "single device (table above)"]
    return table(header, rows, "lrrrl") + "\n\n" + provenance("train_throughput_distributed")


# step_ablation.py's switch names, as the tables show them
ABLATION_LABELS = {
    "label_selection": "label selection",
    "blocked_attention": "block-skipping attention",
    "lean_backward": "lean RMSNorm/SwiGLU backward",
    "lora_merged_weight": "the merged-weight LoRA path",
    "fp32_attention_backward": "fp32 attention backward",
}


def ablation_label(variant: str) -> str:
    """ "without lean_backward" -> "without lean RMSNorm/SwiGLU backward"; "all on" and "all off" as they are."""
    name = variant.removeprefix("without ")
    return f"without {ABLATION_LABELS[name]}" if name in ABLATION_LABELS else variant


def ablation(setting: str) -> Callable[[], str]:
    def render() -> str:
        rows = [
            [ablation_label(r["variant"]), f"{r['s_per_step']:.2f}", r["tok_s"], r["saved_activations_mib"]]
            for r in load("step_ablation")["rows"]
            if r["setting"] == setting
        ]
        return table([setting, "s/step", "tok/s", "saved activations MiB"], rows, "lrrr")

    return render


def recipe_full_single() -> str:
    f32 = throughput_row("full", "fp32", "off")
    return (
        f"Measured on 2 CPU cores, SmolLM2-135M, 4 x 512 packed tokens a step, fp32: {f32['ftune_tok_s']} tok/s and "
        f"{f32['ftune_peak_gib']:.2f} GiB peak, against {f32['bare_tok_s']} tok/s and {f32['bare_peak_gib']:.2f} GiB "
        "for a bare PyTorch loop; compile, torchtune 0.6.1 and the method behind each gain: "
        "[docs/benchmarks.md](../benchmarks.md). " + provenance("train_throughput", up="../../")
    )


def recipe_lora_single() -> str:
    lora = throughput_row("lora", "fp32", "off")
    variants = variant_rows()
    ratios = [
        throughput_row("lora", d, c)["ftune_tok_s"] / throughput_row("full", d, c)["ftune_tok_s"]
        for d in dtypes()
        for c in ("off", "on")
    ]
    return (
        f"Measured on 2 CPU cores, SmolLM2-135M, 4 x 512 packed tokens a step, fp32: LoRA {lora['ftune_tok_s']} tok/s "
        f"and {lora['ftune_peak_gib']:.2f} GiB peak (a bare loop with a textbook LoRA layer: {lora['bare_tok_s']} tok/s, "
        f"{lora['bare_peak_gib']:.2f} GiB), QLoRA {variants['QLoRA']['ftune_tok_s']} tok/s, DoRA "
        f"{variants['DoRA']['ftune_tok_s']} tok/s; compile and why LoRA is {span(ratios, unit='x')} "
        "a full fine-tune's speed here, not more: [docs/benchmarks.md](../benchmarks.md). "
        + provenance("train_throughput", "train_throughput_variants", up="../../")
    )


def _dist(recipe: str) -> tuple[dict, dict]:
    (row,) = [r for r in load("train_throughput_distributed")["rows"] if r["recipe"] == recipe]
    return row, throughput_row(row["single_method"], "fp32", "off")


def recipe_full_dist() -> str:
    row, single = _dist("full_finetune_distributed")
    return (
        f"Measured at world size 2 on one 2-core machine ([docs/benchmarks.md](../benchmarks.md#two-processes-fsdp2-"
        f"on-the-same-machine)): rank 0 peaks at {row['peak_gib_rank0']:.2f} GiB against "
        f"{single['ftune_peak_gib']:.2f} GiB on one device, at {row['tok_s']} tok/s against {single['ftune_tok_s']}. "
        + provenance("train_throughput_distributed", up="../../")
    )


def recipe_lora_dist() -> str:
    row, single = _dist("lora_finetune_distributed")
    return (
        f"Measured at world size 2 on one 2-core machine: rank 0 peaks at {row['peak_gib_rank0']:.2f} GiB against "
        f"{single['ftune_peak_gib']:.2f} GiB on one device, at {row['tok_s']} tok/s against {single['ftune_tok_s']} "
        "([docs/benchmarks.md](../benchmarks.md#two-processes-fsdp2-on-the-same-machine)). "
        + provenance("train_throughput_distributed", up="../../")
    )


def targets() -> str:
    """The design's three targets, each against the rows of the throughput table."""
    rows = load("train_throughput")["rows"]
    full = [r for r in rows if r["method"] == "full"]
    speed = [r["ftune_tok_s"] / r["bare_tok_s"] for r in full]
    cases = [(d, c) for d in dtypes() for c in ("off", "on")]
    lora = {
        case: throughput_row("lora", *case)["ftune_tok_s"] / throughput_row("full", *case)["ftune_tok_s"]
        for case in cases
    }
    best = max(lora, key=lora.get)
    mem = {(r["method"], r["compile"]): [] for r in rows}
    for r in rows:
        mem[(r["method"], r["compile"])].append(r["ftune_peak_gib"] / r["bare_peak_gib"])
    eager = mem[("full", "off")] + mem[("lora", "off")]
    yes_no = {True: "**yes**", False: "**no**"}
    memory = [
        f"{yes_no[max(v) <= 0.75]} for {m} with compile {c} ({', '.join(f'{x:.2f}' for x in v)})"
        for (m, c), v in sorted(mem.items())
    ]
    table_rows = [
        [
            "full fine-tune >= 1.05x the bare loop's tokens/s",
            f"{yes_no[min(speed) >= 1.05]}: {span(speed, unit='x')} in "
            + (f"all {len(speed)} settings" if len(speed) > 2 else "both settings"),
        ],
        [
            "LoRA >= 1.4x the full fine-tune's tokens/s",
            f"{yes_no[min(lora.values()) >= 1.4]}: {span(list(lora.values()), unit='x')} (best: {best[0]} with "
            f"compile {best[1]})",
        ],
        [
            "peak memory <= 0.75x the bare loop's",
            f"without compile {span(eager)}; " + "; ".join(memory),
        ],
    ]
    return table(["target", "reached"], table_rows, "ll")


def others_text(r: dict) -> str:
    """The load sentence of a side-by-side run: the CPU other processes took during its runs."""
    loads = [run["others_cores"] for run in r["runs"]]
    return f"other processes used {min(loads):.2f}-{max(loads):.2f} cores during the runs."


def no_figures(r: dict, script: str, where: str) -> str:
    """What a block says instead of figures when its results file holds a `--quick` or contended run."""
    worst = max(run["others_cores"] for run in r["runs"])
    kind = "a `--quick` run (plumbing, not figures)" if r["quick"] else "a run on a busy machine"
    return (
        f"No figures yet: the results file holds {kind}, measured while other processes used up to "
        f"{worst:.2f} cores, so this page quotes nothing from it. Rerun `python benchmarks/{script}` "
        "on an idle machine, then `python benchmarks/figures/report.py`. " + where
    ).strip()


def vs_torchtune(result: dict | None = None) -> str:
    """torchtune 0.6.1 against ftune (benchmarks/vs_torchtune.py); no figure while the file holds a contended run."""
    r = load("vs_torchtune") if result is None else result
    where = provenance("vs_torchtune") if result is None else ""
    if r["contended"] or r["quick"]:
        return no_figures(r, "vs_torchtune.py", where)
    by = {(row["variant"], row["tool"]): row for row in r["rows"]}
    rows = []
    for variant in dict.fromkeys(row["variant"] for row in r["rows"]):
        tt, ft = by.get((variant, "torchtune")), by.get((variant, "ftune"))
        if tt is None or ft is None:
            continue
        rows.append([
            variant,
            f"{tt['tok_s']:.0f} [{tt['tok_s_min']:.0f}-{tt['tok_s_max']:.0f}]",
            f"{ft['tok_s']:.0f} [{ft['tok_s_min']:.0f}-{ft['tok_s_max']:.0f}]",
            f"{ft['tok_s'] / tt['tok_s']:.2f}x",
            f"{tt['peak_rss_gib']:.2f}", f"{ft['peak_rss_gib']:.2f}", f"{ft['peak_rss_gib'] / tt['peak_rss_gib']:.2f}",
            f"{tt['first_step_s']:.1f} / {ft['first_step_s']:.1f}",
            f"{tt['step1_loss']:.4f} / {ft['step1_loss']:.4f}",
            f"{tt['matmul_fraction']:.0%} / {ft['matmul_fraction']:.0%}",
            _of_bound(tt, ft),
        ])  # fmt: skip
    header = ["variant", "torchtune tok/s", "ftune tok/s", "ftune / torchtune", "torchtune peak GiB",
              "ftune peak GiB", "ftune / torchtune", "first step s (tt / ftune)", "step-1 loss (tt / ftune)",
              "of square matmul peak (tt / ftune)", "of the step's matmul bound (tt / ftune)"]  # fmt: skip
    w = r["workload"]
    run_line = (
        f"`{r['command']}`: {w['steps']} steps of {w['batch']} x {w['seq_len']} tokens, {w['repeats']} "
        f"repeat{'s' if w['repeats'] > 1 else ''} alternating torchtune and ftune; tok/s = median [range] over the "
        f"repeats; fp32 matrix-product peak {max(r['matmul_peak_gflops']):.0f} GFLOP/s (measured before and after); "
        + others_text(r)
    )
    bounds = r.get("matmul_bound")  # results files before the model-shaped bound lack it
    bound = (
        "The step's matmul bound is the time of the step's own matrix products on this machine (every "
        "linear layer's forward, input gradient and, for full, weight gradient, LoRA's products, with the "
        "step's shapes, timed alone by `ftune.runtime.matmul_speed`; attention, norms and the optimizer "
        "left out): no tool can step faster with these kernels. Bounds here: "
        + ", ".join(f"{key} {b['tok_s']:.0f} tok/s" for key, b in bounds.items())
        + " (the faster of the measurements before and after the runs). The square peak is a 2048^3 product's rate."
        if bounds
        else "This results file predates the model-shaped bound; rerun the benchmark to measure it."
    )
    return "\n\n".join(
        x for x in (table(header, rows, "lrrrrrrrrrr"), run_line, bound, _generation(r), where) if x
    )


def _generation(r: dict) -> str:
    """The results file's generation line: greedy decoding, ftune against transformers' `generate`."""
    gen = r.get("generation")  # results files before it lack it; --quick runs none
    if not gen:
        return ""
    by = {row["tool"]: row for row in gen["rows"]}
    ft, hf = by["ftune"], by["transformers"]
    w = gen["workload"]
    return (
        f"Generation in the same invocation (greedy, KV cache, batch 1, {w['new_tokens']} new tokens, fp32, "
        f"`benchmarks/generate_vs_transformers.py`): ftune {ft['new_tokens_per_second']:.1f} new tok/s "
        f"[{ft['new_tokens_per_second_range'][0]:.1f}-{ft['new_tokens_per_second_range'][1]:.1f}] against "
        f"transformers' `generate` {hf['new_tokens_per_second']:.1f} "
        f"[{hf['new_tokens_per_second_range'][0]:.1f}-{hf['new_tokens_per_second_range'][1]:.1f}] "
        f"({ft['new_tokens_per_second'] / hf['new_tokens_per_second']:.2f}x); the eval path (batch "
        f"{w['eval']['batch']}, stop tokens): {ft['eval_prompts_per_second']:.2f} against "
        f"{hf['eval_prompts_per_second']:.2f} prompts/s, {ft['same_answers']} answers the same."
    )


def _of_bound(tt: dict, ft: dict) -> str:
    if "bound_fraction" not in tt:
        return "not measured"
    return f"{tt['bound_fraction']:.0%} / {ft['bound_fraction']:.0%}"


def vs_torchtune_compile() -> str:
    """The compile-on variants of benchmarks/vs_torchtune.py (their own results file)."""
    return vs_torchtune(load("vs_torchtune_compile")) + "\n\n" + provenance("vs_torchtune_compile")


def vs_torchtune_instruct(result: dict | None = None) -> str:
    """One epoch of instruction data at each tool's default batching (benchmarks/vs_torchtune_instruct.py)."""
    r = load("vs_torchtune_instruct") if result is None else result
    where = provenance("vs_torchtune_instruct") if result is None else ""
    if r["contended"] or r["quick"]:
        return no_figures(r, "vs_torchtune_instruct.py", where)
    by = {row["tool"]: row for row in r["rows"]}
    tt, ft = by["torchtune"], by["ftune"]
    w = r["workload"]
    rows = [[
        f"{tt['epoch_s']:.0f} [{tt['epoch_s_min']:.0f}-{tt['epoch_s_max']:.0f}]",
        f"{ft['epoch_s']:.0f} [{ft['epoch_s_min']:.0f}-{ft['epoch_s_max']:.0f}]",
        f"{tt['epoch_s'] / ft['epoch_s']:.2f}x",
        f"{tt['peak_rss_gib']:.2f}", f"{ft['peak_rss_gib']:.2f}", f"{ft['peak_rss_gib'] / tt['peak_rss_gib']:.2f}",
        f"{w['padded_tokens']} / {w['tokens']}", f"{tt['step1_loss']:.4f} / {ft['step1_loss']:.4f}",
    ]]  # fmt: skip
    header = ["torchtune epoch s", "ftune epoch s", "ftune's speed-up", "torchtune peak GiB", "ftune peak GiB",
              "ftune / torchtune", "positions computed (tt / ftune)", "step-1 loss (tt / ftune)"]  # fmt: skip
    run_line = (
        f"`{r['command']}`: {w['samples']} samples ({w['labelled_tokens']} labelled tokens), {w['steps']} steps of "
        f"batch {w['batch']}, at most {w['max_seq_len']} tokens a sample, {w['repeats']} repeats alternating "
        "torchtune and ftune; epoch s = median [range] over the repeats; " + others_text(r)
    )
    if "ftune-padded" in by:  # the same ftune run with right-padded batches (--padded)
        pad = by["ftune-padded"]
        run_line += (
            f" ftune with right-padded batches (`collate_fn=null`, the positions torchtune computes) took "
            f"{pad['epoch_s']:.0f} s [{pad['epoch_s_min']:.0f}-{pad['epoch_s_max']:.0f}] at {pad['peak_rss_gib']:.2f} "
            f"GiB: padding_free makes ftune's epoch {pad['epoch_s'] / ft['epoch_s']:.2f}x faster."
        )
    return "\n\n".join(x for x in (table(header, rows, "rrrrrrrr"), run_line, where) if x)
