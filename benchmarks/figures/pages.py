"""The figures of README.md, the quickstart, the QAT experiment, the glossary and the inference recipes' pages."""

from __future__ import annotations

import statistics

from qat_record import GROUP_SIZE, group_size, learn_ranges

from figures.common import load, lr_text, minutes, provenance, table


def readme_speed() -> str:
    r = load("vs_torchtune")
    if r["contended"] or r["quick"]:
        return (
            "**Speed**: the side-by-side run against torchtune 0.6.1 in the repo was not measured on an idle "
            "machine, so no figure is quoted: [docs/benchmarks.md](docs/benchmarks.md). "
            + provenance("vs_torchtune", up="")
        )
    by = {(row["variant"], row["tool"]): row for row in r["rows"]}
    parts = []
    for variant, label in (("full-fp32", "full fine-tune"), ("lora-fp32", "LoRA")):
        tt, ft = by[(variant, "torchtune")], by[(variant, "ftune")]
        parts.append(
            f"{label} {ft['tok_s'] / tt['tok_s']:.2f}x its tokens/s in {ft['peak_rss_gib'] / tt['peak_rss_gib']:.2f}x "
            "its peak memory"
        )
    return (
        "**Speed**: against torchtune 0.6.1's own recipes on the same machine, model (SmolLM2-135M) and "
        f"batches (4 x 512 tokens, fp32): {'; '.join(parts)}. {_readme_instruct()}Both, with the profile of a "
        "step and what holds the memory: [docs/benchmarks.md](docs/benchmarks.md#against-torchtune-061). "
        + provenance("vs_torchtune", up="")
        + (" " + provenance("vs_torchtune_instruct", up="") if _readme_instruct() else "")
    )


def _readme_instruct() -> str:
    """The instruction-data epoch at each tool's defaults, when its results file holds an idle run."""
    r = load("vs_torchtune_instruct")
    if r["contended"] or r["quick"]:
        return ""
    tt, ft = ({row["tool"]: row for row in r["rows"]}[tool] for tool in ("torchtune", "ftune"))
    w = r["workload"]
    return (
        f"An epoch of {w['samples']} instruction pairs (IFBench, LoRA) at each tool's default batching: "
        f"{ft['epoch_s']:.0f} s against {tt['epoch_s']:.0f} s ({tt['epoch_s'] / ft['epoch_s']:.2f}x faster) in "
        f"{ft['peak_rss_gib'] / tt['peak_rss_gib']:.2f}x the peak memory. "
    )


def readme_quickstart() -> str:
    q = load("quickstart")["rows"][0]
    return (
        f"Measured here (2 CPU cores): exact match on {q['num_prompts']} held-out prompts goes from "
        f"**{q['base_exact_match']}% to {q['tuned_exact_match']}%** after {q['steps']} LoRA steps; the whole "
        f"command took {minutes(q['fresh_clone_seconds'])} on a fresh clone of an idle machine "
        f"({minutes(q['after_setup_seconds'])} when `.venv` and the converted model exist; training "
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
        f"{minutes(q['after_setup_seconds'])}: base eval {q['base_eval_seconds']} s, training "
        f"{q['train_seconds']} s at a median {q['train_tok_s']} tokens/s, the second eval "
        f"{q['tuned_eval_seconds']} s. On a fresh clone (new `.venv`, new `FTUNE_HOME`, the conversion) the "
        f"whole command took {minutes(q['fresh_clone_seconds'])}."
    )
    return table(header, rows, "ll") + "\n\n" + timing + "\n\n" + provenance("quickstart")


def quickstart_gemma3(up: str = "../") -> str:
    q = load("quickstart_gemma3")["rows"][0]
    n = q["num_prompts"]
    rows = [
        ["Gemma 3 270M, base", f"{q['base_exact_match']}% ({q['base_exact_match'] * n // 100}/{n})"],
        [
            f"after {q['steps']} LoRA steps (`{q['config']}`: batch {q['batch_size']}, rank {q['lora_rank']})",
            f"{q['tuned_exact_match']}% ({q['tuned_exact_match'] * n // 100}/{n})",
        ],
    ]
    timing = (
        f"`./quickstart.sh gemma3` with `.venv` and the converted model in place took "
        f"{minutes(q['after_setup_seconds'])}: base eval {q['base_eval_seconds']} s, training "
        f"{q['train_seconds']} s at a median {q['train_tok_s']} tokens/s (fp32, no native bf16 on this CPU), "
        f"the second eval {q['tuned_eval_seconds']} s."
    )
    header = ["", f"exact match on {n} held-out prompts"]
    return table(header, rows, "ll") + "\n\n" + timing + "\n\n" + provenance("quickstart_gemma3", up=up)


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


# The keys of a run's perplexities in qat_experiment.json's "variants" (benchmarks/qat_experiment.py).
_PPL_KEYS = {"word_ppl": "word_perplexity", "bits_per_byte": "bits_per_byte"}


def _variant_recovered(v: dict, metric: str) -> float:
    key = _PPL_KEYS[metric]
    ptq, full, conv = v["ptq_full"][key], v["float_full"][key], v["converted"][key]
    return (ptq - conv) / (ptq - full)


def qat_variants() -> str:
    """The runs that varied the experiment's settings: recovered fraction per run, against its own full FT."""
    base = {s: recovered(s) for s in sorted({r["seed"] for r in load("qat_experiment")["rows"]} - {"-"})}
    rows = [
        ["QAT, lr 5e-5 (the table above)", s, f"{base[s]['word_ppl']:.1%}", f"{base[s]['bits_per_byte']:.1%}"]
        for s in base
    ]
    variants = load("qat_experiment")["variants"]
    for v in variants["runs"]:
        rows.append(
            [
                v["variant"],
                v["seed"],
                f"{_variant_recovered(v, 'word_ppl'):.1%}",
                f"{_variant_recovered(v, 'bits_per_byte'):.1%}",
            ]
        )
    ppl = [
        [
            v["variant"],
            v["seed"],
            f"{v['float_full']['word_perplexity']:.2f}",
            f"{v['ptq_full']['word_perplexity']:.2f}",
            f"{v['float']['word_perplexity']:.2f}" if v.get("float") else "—",
            f"{v['converted']['word_perplexity']:.2f}",
        ]
        for v in variants["runs"]
    ]
    return (
        table(["run", "seed", "recovered (word ppl)", "recovered (bits/byte)"], rows, "llrr")
        + "\n\nWord perplexities of those runs (the full fine-tune each is measured against, its PTQ, the run's "
        "own model in float and converted to 8da4w):\n\n"
        + table(["run", "seed", "full FT, float", "full FT, PTQ", "float", "converted"], ppl, "llrrrr")
        + f"\n\n{variants['note']} Measured on [qat_experiment.json](../benchmarks/results/qat_experiment.json) "
        f'("variants"): {load("qat_experiment")["machine"]["cpu"]}, torch '
        f"{load('qat_experiment')['machine']['torch']}, commit {variants['commit'][:7]}, {variants['date']}."
    )


def _sweep_label(settings: dict, method: str) -> str:
    lr = settings["lora_lr"] if method == "qat_lora" else settings["lr"]
    fq = settings["fake_quant_after"]
    delay = "" if fq is None else f", fake quant after step {fq}"
    size = group_size(settings)
    delay += (
        "" if size == GROUP_SIZE else f", group size {size}" if size else ", one scale per output channel"
    )
    delay += ", learned ranges" if learn_ranges(settings) and method == "qat" else ""
    name = "QAT+LoRA" if method == "qat_lora" else "QAT"
    return f"{name}, lr {lr_text(lr)} (full FT at lr {lr_text(settings['lr'])}), {settings['steps']} steps{delay}"


def qat_sweep() -> str:
    """The runs recorded by benchmarks/qat_record.py: each method against the full fine-tune of the same run."""
    entries = load("qat_experiment").get("sweep", [])
    rows, lines = [], []
    for e in entries:
        for seed, r in e["seeds"].items():
            ppl = r["perplexity"]
            for method, key, conv, flt in (
                ("qat", "recovered", "qat_converted", "float_qat"),
                ("qat_lora", "recovered_qat_lora", "qat_lora_converted", "float_qat_lora"),
            ):
                if key not in r:
                    continue
                rows.append([
                    _sweep_label(e["settings"], method), seed.removeprefix("seed"),
                    f"{ppl['float_full']['word_perplexity']:.2f}", f"{ppl['ptq_full']['word_perplexity']:.2f}",
                    f"{ppl[flt]['word_perplexity']:.2f}", f"{ppl[conv]['word_perplexity']:.2f}",
                    f"**{r[key]['word_perplexity']:.1%}**", f"{r[key]['bits_per_byte']:.1%}",
                ])  # fmt: skip
        m = e["machine"]
        lines.append(
            f"- `{e['command']}`: commit {e['commit'][:7]}, {e['date']}, {m['cpu']} ({', '.join(m['flags'])}), "
            f"torch {m['torch']}, torchao {m['torchao']}; {e['total_seconds'] / 60:.0f} minutes in all ({e['load']})."
        )
    header = ["run", "seed", "full FT, float", "full FT, PTQ", "float", "converted", "recovered (word ppl)",
              "recovered (bits/byte)"]  # fmt: skip
    return (
        table(header, rows, "llrrrrrr")
        + "\n\nWord perplexities; each run's recovered fraction is against the full fine-tune of the same run "
        "(same learning rate, data, steps and seed). Measured on [qat_experiment.json]"
        '(../benchmarks/results/qat_experiment.json) ("sweep"):\n\n' + "\n".join(lines)
    )


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


def generate_vs_transformers() -> str:
    r = load("generate_vs_transformers")
    by = {row["tool"]: row for row in r["rows"]}
    ft, hf = by["ftune"], by["transformers"]
    w = r["workload"]
    return (
        f"Against transformers' `generate` on the same folder ({w['model']}, fp32, batch 1, greedy, {w['new_tokens']} "
        f"new tokens, {w['prompts']} chat prompts x {w['rounds']} rounds, alternating in one process): ftune "
        f"{ft['new_tokens_per_second']} new tokens/s [{ft['new_tokens_per_second_range'][0]}-"
        f"{ft['new_tokens_per_second_range'][1]}], transformers {hf['new_tokens_per_second']} "
        f"[{hf['new_tokens_per_second_range'][0]}-{hf['new_tokens_per_second_range'][1]}] "
        f"({ft['new_tokens_per_second'] / hf['new_tokens_per_second']:.2f}x); prefill {ft['prefill_ms']:.0f} ms "
        f"against {hf['prefill_ms']:.0f} ms. The greedy outputs agree token for token at first, then part "
        f"({r['same_tokens']}). " + _eval_vs_transformers(r, ft, hf)
        + "`python benchmarks/generate_vs_transformers.py`. " + provenance("generate_vs_transformers", up="../../")
    )  # fmt: skip


def _eval_vs_transformers(r: dict, ft: dict, hf: dict) -> str:
    """The eval path's sentence (batched greedy decoding), when the results file has it."""
    if "eval_prompts_per_second" not in ft:
        return ""
    e = r["workload"]["eval"]
    return (
        f"The eval recipe's path, {e['prompts']} date prompts in batches of {e['batch']}, at most "
        f"{e['max_new_tokens']} new tokens, stopping at the stop tokens: ftune's `exact_match` "
        f"{ft['eval_prompts_per_second']} prompts/s, transformers' batched `generate` (left-padded) "
        f"{hf['eval_prompts_per_second']} ({ft['eval_prompts_per_second'] / hf['eval_prompts_per_second']:.2f}x; "
        f"{ft['same_answers']} answers the same text). "
    )
