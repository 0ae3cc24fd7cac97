"""The figures of README.md and docs/, generated from benchmarks/results/*.json (the one source).

    python benchmarks/report.py            # rewrite every generated block in place
    python benchmarks/report.py --check    # exit 1, naming the blocks that differ (what the tests run)

A generated block sits between `<!-- figures:NAME -->` and `<!-- /figures:NAME -->` in a page; edit
the results file (or rerun the benchmark that writes it), never the block. Every block ends with
the machine, commit and date its figures were measured on.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def provenance(*names: str, up: str = "../") -> str:
    """The closing line of a block: each results file (linked `up` from the page), machine, commit, date."""
    parts = []
    for name in names:
        r = load(name)
        commits = sorted({row.get("commit", r["commit"])[:7] for row in r["rows"]} | {r["commit"][:7]})
        parts.append(
            f"[{name}.json]({up}benchmarks/results/{name}.json): {r['machine']['cpu']}, torch "
            f"{r['machine']['torch']}, commit {', '.join(commits)}, {r['date']}"
        )
    return "Measured on " + "; ".join(parts) + "."


def table(header: list[str], rows: list[list[object]], align: str) -> str:
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


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


def _by(method: str, dtype: str, compile_: str) -> dict:
    (row,) = [
        r
        for r in load("train_throughput")["rows"]
        if (r["method"], r["dtype"], r["compile"]) == (method, dtype, compile_)
    ]
    return row


def lora_over_full() -> str:
    rows = []
    for dtype in ("fp32", "bf16"):
        for c in ("off", "on"):
            lora, full = _by("lora", dtype, c), _by("full", dtype, c)
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


def variants() -> str:
    rows = []
    for r in load("train_throughput_variants")["rows"]:
        lora = _by("lora", r["dtype"], "off")
        same = f"{lora['ftune_tok_s']} tok/s, {lora['ftune_peak_gib']:.2f} GiB"
        rows.append([r["method"], r["dtype"], r["ftune_tok_s"], f"{r['ftune_peak_gib']:.2f}", same])
    header = ["method", "dtype", "ftune tok/s", "ftune peak GiB", "LoRA, same dtype, table above"]
    return table(header, rows, "llrrl") + "\n\n" + provenance("train_throughput_variants")


def distributed() -> str:
    rows = []
    for r in load("train_throughput_distributed")["rows"]:
        single = _by(r["single_method"], "fp32", "off")
        same = f"{single['ftune_tok_s']} tok/s, {single['ftune_peak_gib']:.2f} GiB"
        rows.append([r["recipe"], r["world_size"], r["tok_s"], f"{r['peak_gib_rank0']:.2f}", same])
    header = ["recipe", "world size", "tok/s (global)", "peak GiB, rank 0", "single device (table above)"]
    return table(header, rows, "lrrrl") + "\n\n" + provenance("train_throughput_distributed")


def ablation(setting: str) -> Callable[[], str]:
    def render() -> str:
        rows = [
            [r["variant"], f"{r['s_per_step']:.2f}", r["tok_s"], r["saved_activations_mib"]]
            for r in load("step_ablation")["rows"]
            if r["setting"] == setting
        ]
        return table([setting, "s/step", "tok/s", "saved activations MiB"], rows, "lrrr")

    return render


def readme_speed() -> str:
    rows = load("train_throughput")["rows"]
    speed = [r["ftune_tok_s"] / r["bare_tok_s"] for r in rows]
    memory = [r["ftune_peak_gib"] / r["bare_peak_gib"] for r in rows]
    return (
        f"**Speed**: on the same machine the recipes train {min(speed):.2f}-{max(speed):.2f}x faster than a "
        f"bare PyTorch loop on the same model and batches, in {min(memory):.2f}-{max(memory):.2f}x its peak "
        "memory (SmolLM2-135M, full and LoRA fine-tuning, fp32/bf16, compile on/off): "
        "[docs/benchmarks.md](docs/benchmarks.md). " + provenance("train_throughput", up="")
    )


def _minutes(seconds: int) -> str:
    return f"{seconds // 60} min {seconds % 60} s"


def readme_quickstart() -> str:
    q = load("quickstart")["rows"][0]
    return (
        f"Measured here (2 CPU cores): exact match on {q['num_prompts']} held-out prompts goes from "
        f"**{q['base_exact_match']}% to {q['tuned_exact_match']}%** after {q['steps']} LoRA steps; the whole "
        f"command took {_minutes(q['fresh_clone_seconds'])} on a fresh clone of an idle machine "
        f"({_minutes(q['after_setup_seconds'])} when `.venv` and the converted model exist; training "
        f"{q['train_seconds']} s at a median {q['train_tok_s']} tokens/s). " + provenance("quickstart", up="")
    )


def quickstart() -> str:
    q = load("quickstart")["rows"][0]
    n = q["num_prompts"]
    header = ["", f"exact match on {n} held-out prompts"]
    rows = [
        ["SmolLM2-135M-Instruct, base", f"{q['base_exact_match']}% ({q['base_exact_match'] * n // 100}/{n})"],
        [
            f"after {q['steps']} LoRA steps (batch {q['batch_size']}, rank {q['lora_rank']}, all linear layers)",
            f"{q['tuned_exact_match']}% ({q['tuned_exact_match'] * n // 100}/{n})",
        ],
    ]
    timing = (
        f"On the idle machine, with `.venv` and the converted model in place, steps 4-6 took "
        f"{_minutes(q['after_setup_seconds'])}: base eval {q['base_eval_seconds']} s, training "
        f"{q['train_seconds']} s at a median {q['train_tok_s']} tokens/s, the second eval "
        f"{q['tuned_eval_seconds']} s. On a fresh clone (new `.venv`, new `FTUNE_HOME`, the conversion) the "
        f"whole command took {_minutes(q['fresh_clone_seconds'])}."
    )
    return table(header, rows, "ll") + "\n\n" + timing + "\n\n" + provenance("quickstart")


QAT_METRICS = ("word_ppl", "byte_ppl", "bits_per_byte", "token_ppl")


def qat_results() -> str:
    rows = [
        [r["model"], r["seed"], f"{r['word_ppl']:.2f}", f"{r['byte_ppl']:.4f}", f"{r['bits_per_byte']:.4f}"]
        + [f"{r['token_ppl']:.2f}"]
        for r in load("qat_experiment")["rows"]
    ]
    header = ["model", "seed", "word ppl", "byte ppl", "bits/byte", "token ppl"]
    return table(header, rows, "llrrrr") + "\n\n" + provenance("qat_experiment")


def recovered(seed: str) -> dict[str, float]:
    rows = {r["model"]: r for r in load("qat_experiment")["rows"] if r["seed"] == seed}
    ptq, qat, full = rows["full FT, PTQ 8da4w"], rows["QAT FT, converted 8da4w"], rows["full FT, float"]
    return {m: (ptq[m] - qat[m]) / (ptq[m] - full[m]) for m in QAT_METRICS}


def qat_recovered() -> str:
    seeds = sorted({r["seed"] for r in load("qat_experiment")["rows"]} - {"-"})
    per_seed = {s: recovered(s) for s in seeds}
    rows = [[s, *(f"{per_seed[s][m]:.1%}" for m in QAT_METRICS)] for s in seeds]
    rows.append(["mean", *(f"{statistics.mean(per_seed[s][m] for s in seeds):.1%}" for m in QAT_METRICS)])
    return table(["seed", "word ppl", "byte ppl", "bits/byte", "token ppl"], rows, "lrrrr")


def bf16_slowdown() -> str:
    r = load("bf16_matmul")
    ratios = sorted(run["ratio"] for run in r["rows"])
    return (
        f"Measured with `{r['command']}`: on {r['machine']['cpu']} with {', '.join(r['machine']['flags'])} "
        f"and no native bf16, a {r['size']}x{r['size']} bf16 matmul took {statistics.median(ratios):.0f}x the "
        f"fp32 time ({ratios[0]:.0f}x to {ratios[-1]:.0f}x over {len(ratios)} runs; approximate, the machine "
        f"was busy; commit {r['commit'][:7]}, {r['date']}, "
        "[bf16_matmul.json](../benchmarks/results/bf16_matmul.json))."
    )


def eval_speed() -> str:
    rows = [
        [r["model"], r["dtype"], r["batch_size"], r["prompts"], f"{r['seconds']} s", f"{r['exact_match']}%"]
        for r in load("eval_speed")["rows"]
    ]
    header = ["model", "dtype", "batch_size", "prompts", "time", "exact match"]
    return table(header, rows, "llrrrr") + "\n\n" + provenance("eval_speed", up="../../")


def recipe_full_single() -> str:
    f32, b16 = _by("full", "fp32", "off"), _by("full", "bf16", "off")
    return (
        f"Measured on 2 CPU cores, SmolLM2-135M, 4 x 512 packed tokens a step: {f32['ftune_tok_s']} tok/s and "
        f"{f32['ftune_peak_gib']:.2f} GiB peak in fp32, {b16['ftune_tok_s']} tok/s and {b16['ftune_peak_gib']:.2f} GiB "
        f"in bf16, against {f32['bare_tok_s']} and {b16['bare_tok_s']} tok/s ({f32['bare_peak_gib']:.2f} and "
        f"{b16['bare_peak_gib']:.2f} GiB) for a bare PyTorch loop; compile and the method behind each gain: "
        "[docs/benchmarks.md](../benchmarks.md). " + provenance("train_throughput", up="../../")
    )


def recipe_lora_single() -> str:
    lora = _by("lora", "fp32", "off")
    variants = {r["method"]: r for r in load("train_throughput_variants")["rows"] if r["dtype"] == "fp32"}
    ratios = [
        _by("lora", d, c)["ftune_tok_s"] / _by("full", d, c)["ftune_tok_s"]
        for d in ("fp32", "bf16")
        for c in ("off", "on")
    ]
    return (
        f"Measured on 2 CPU cores, SmolLM2-135M, 4 x 512 packed tokens a step, fp32: LoRA {lora['ftune_tok_s']} tok/s "
        f"and {lora['ftune_peak_gib']:.2f} GiB peak (a bare loop with a textbook LoRA layer: {lora['bare_tok_s']} tok/s, "
        f"{lora['bare_peak_gib']:.2f} GiB), QLoRA {variants['QLoRA']['ftune_tok_s']} tok/s, DoRA "
        f"{variants['DoRA']['ftune_tok_s']} tok/s; bf16, compile and why LoRA is {min(ratios):.2f}-{max(ratios):.2f}x "
        "a full fine-tune's speed here, not more: [docs/benchmarks.md](../benchmarks.md). "
        + provenance("train_throughput", "train_throughput_variants", up="../../")
    )


def _dist(recipe: str) -> tuple[dict, dict]:
    (row,) = [r for r in load("train_throughput_distributed")["rows"] if r["recipe"] == recipe]
    return row, _by(row["single_method"], "fp32", "off")


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


def _gq(what: str, dtype_or_scheme: str) -> dict:
    (row,) = [
        r
        for r in load("generate_quantize")["rows"]
        if r["what"] == what and dtype_or_scheme in (r.get("dtype"), r.get("scheme"))
    ]
    return row


def generate_speed() -> str:
    f32, q = _gq("generate", "fp32"), _gq("generate", "8da4w")
    return (
        f"Measured on 2 shared CPU threads (AMD EPYC), SmolLM2-135M-Instruct, fp32, batch 1, with the command "
        f"above: prefill of a {f32['prompt_tokens']}-token prompt {f32['prefill_seconds']} s, then "
        f"{f32['decode_tok_s']} tokens/s. The 8da4w quantized checkpoint (`quantized_checkpoint=...`) decoded at "
        f"{q['decode_tok_s']} tokens/s on the same machine. " + provenance("generate_quantize", up="../../")
    )


def quantize_speed() -> str:
    q, f32, q8 = _gq("quantize", "8da4w"), _gq("generate", "fp32"), _gq("generate", "8da4w")
    return (
        f"Measured on 2 shared CPU threads, SmolLM2-135M-Instruct: {q['quantize_seconds']} s to quantize "
        f"{q['linears']} linears, {q['with_save_seconds']} s with the save. 8da4w gives a {q['model_pt_mb']} MB "
        f"`model.pt` from a {q['source_mb']} MB fp32 source: torchao 0.18 stores the int4 values unpacked, one per "
        f"int8 byte, and the {q['embedding_mb']} MB fp32 embedding is not quantized. On CPU the quantized model is "
        f"slower than fp32 ({q8['decode_tok_s']} against {f32['decode_tok_s']} tokens/s decoding at batch 1, see "
        "[generate](generate.md)). " + provenance("generate_quantize", up="../../")
    )


def _span(values: list[float], fmt: str = ".2f", unit: str = "") -> str:
    low, high = min(values), max(values)
    return (
        f"{low:{fmt}}{unit}-{high:{fmt}}{unit}" if f"{low:{fmt}}" != f"{high:{fmt}}" else f"{low:{fmt}}{unit}"
    )


def targets() -> str:
    """The design's three targets, each against the rows of the throughput table."""
    rows = load("train_throughput")["rows"]
    full = [r for r in rows if r["method"] == "full"]
    speed = [r["ftune_tok_s"] / r["bare_tok_s"] for r in full]
    cases = [(d, c) for d in ("fp32", "bf16") for c in ("off", "on")]
    lora = {case: _by("lora", *case)["ftune_tok_s"] / _by("full", *case)["ftune_tok_s"] for case in cases}
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
            f"{yes_no[min(speed) >= 1.05]}: {_span(speed, unit='x')} in all {len(speed)} settings",
        ],
        [
            "LoRA >= 1.4x the full fine-tune's tokens/s",
            f"{yes_no[min(lora.values()) >= 1.4]}: {_span(list(lora.values()), unit='x')} (best: {best[0]} with "
            f"compile {best[1]})",
        ],
        [
            "peak memory <= 0.75x the bare loop's",
            f"without compile {_span(eager)}; " + "; ".join(memory),
        ],
    ]
    return table(["target", "reached"], table_rows, "ll")


# block name -> (page, renderer)
BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
    "throughput": ("docs/benchmarks.md", throughput),
    "lora_over_full": ("docs/benchmarks.md", lora_over_full),
    "targets": ("docs/benchmarks.md", targets),
    "variants": ("docs/benchmarks.md", variants),
    "distributed": ("docs/benchmarks.md", distributed),
    "ablation_full_fp32": ("docs/benchmarks.md", ablation("full, fp32")),
    "ablation_full_bf16": ("docs/benchmarks.md", ablation("full, bf16")),
    "ablation_lora_fp32": ("docs/benchmarks.md", ablation("LoRA, fp32")),
    "readme_speed": ("README.md", readme_speed),
    "readme_quickstart": ("README.md", readme_quickstart),
    "quickstart": ("docs/quickstart.md", quickstart),
    "qat_results": ("docs/qat.md", qat_results),
    "qat_recovered": ("docs/qat.md", qat_recovered),
    "bf16_slowdown": ("docs/glossary.md", bf16_slowdown),
    "eval_speed": ("docs/recipes/eval.md", eval_speed),
    "recipe_full_single": ("docs/recipes/full_finetune_single_device.md", recipe_full_single),
    "recipe_lora_single": ("docs/recipes/lora_finetune_single_device.md", recipe_lora_single),
    "recipe_full_dist": ("docs/recipes/full_finetune_distributed.md", recipe_full_dist),
    "recipe_lora_dist": ("docs/recipes/lora_finetune_distributed.md", recipe_lora_dist),
    "generate_speed": ("docs/recipes/generate.md", generate_speed),
    "quantize_speed": ("docs/recipes/quantize.md", quantize_speed),
}


def pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- figures:{name} -->\n)(.*?)(\n<!-- /figures:{name} -->)", re.S)


def render(text: str, page: str) -> str:
    """`text` (the page `page`) with each of its blocks regenerated; raises when a block's markers are missing."""
    for name, (where, renderer) in BLOCKS.items():
        if where != page:
            continue
        if not pattern(name).search(text):
            raise ValueError(
                f"{page} lacks the markers <!-- figures:{name} --> ... <!-- /figures:{name} -->; "
                "add them where the figures go."
            )
        body = renderer()
        text = pattern(name).sub(lambda m, body=body: m.group(1) + body + m.group(3), text)
    return text


def stale_pages() -> list[str]:
    """Pages whose generated blocks differ from what the results files give."""
    return [
        page
        for page in sorted({p for p, _ in BLOCKS.values()})
        if render((ROOT / page).read_text(encoding="utf-8"), page)
        != (ROOT / page).read_text(encoding="utf-8")
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="only report pages that differ")
    args = parser.parse_args(argv)
    stale = stale_pages()
    if args.check:
        for page in stale:
            print(
                f"{page}: generated figures differ from benchmarks/results; run python benchmarks/report.py"
            )
        return 1 if stale else 0
    for page in stale:
        path = ROOT / page
        path.write_text(render(path.read_text(encoding="utf-8"), page), encoding="utf-8")
        print(f"rewrote the figures of {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
