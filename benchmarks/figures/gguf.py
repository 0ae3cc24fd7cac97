"""The GGUF figures: the quickstart's adapter through llama.cpp in each file type (docs/checkpoints.md,
docs/quickstart.md; gguf_quickstart.py) and each file type on the real model (gguf_types.py)."""

from __future__ import annotations

from figures.common import load, provenance, table


def _gguf_rows() -> tuple[dict, list[dict]]:
    rows = load("gguf_quickstart")["rows"]
    (ours,) = [r for r in rows if r["runtime"] == "ftune"]
    return ours, [r for r in rows if r["runtime"] == "llama.cpp"]


def _gguf_label(r: dict) -> str:
    """A file row's type, with the calibration text of its importance matrix if it has one."""
    return f"{r['type']} + imatrix" if r.get("imatrix") else r["type"]


def _imatrix_sentence() -> str:
    """What the `+ imatrix` rows were quantized with (the results file's `imatrix`), or nothing."""
    im = load("gguf_quickstart").get("imatrix")
    if not im:
        return ""
    return (
        f"`+ imatrix`: quantized with an importance matrix of {im['text']} ({im['chunks']} chunks of "
        f"{im['chunk_size']} tokens at most, `ftune export imatrix` of the merged model), never of the held-out prompts. "
    )


def gguf_quickstart() -> str:
    """docs/checkpoints.md: the quickstart's adapter exported and scored by llama.cpp (gguf_quickstart.py)."""
    ours, files = _gguf_rows()
    n = ours["num_prompts"]
    rows = [
        [
            "ftune (`ftune run eval`, the adapter merged in fp32)",
            "-",
            f"{ours['exact_match']:g}% ({ours['num_correct']}/{n})",
            "-",
        ]
    ]
    rows += [
        [f"llama.cpp, {_gguf_label(r)}", f"{r['size_bytes'] / 1e6:.0f} MB", f"{r['exact_match']:g}% ({r['num_correct']}/{n})",
         f"{r['same_answer_as_ftune']}/{n}"]
        for r in files
    ]  # fmt: skip
    header = ["", "file", f"exact match, {n} held-out prompts", "same answer as ftune"]
    target = ""
    for kind, within in (("Q8_0", 2), ("Q4_K_M", 3)):  # issue 42's targets
        for row in [r for r in files if r["type"] == kind]:
            gap = abs(row["exact_match"] - ours["exact_match"])
            target += f"{_gguf_label(row)} is {gap:g} point{'' if gap == 1 else 's'} from ftune's own score (the target: within {within}). "
    prompts = ", ".join(f"{_gguf_label(r)} {r['same_prompt_tokens']}/{n}" for r in files)
    exports = ", ".join(f"{_gguf_label(r)} {r['export_seconds']:g} s" for r in files)
    text = (
        f"{_imatrix_sentence()}{target}The prompts llama.cpp built from the chat template stored in the file were ftune's prompt tokens "
        f"exactly ({prompts}). Export took {exports} (merge included, on 2 shared cores)."
    )
    return table(header, rows, "lrrr") + "\n\n" + text + "\n\n" + provenance("gguf_quickstart")


def quickstart_gguf() -> str:
    """docs/quickstart.md: one sentence of the same results."""
    ours, files = _gguf_rows()
    n = ours["num_prompts"]
    parts = [f"{_gguf_label(r)} ({r['size_bytes'] / 1e6:.0f} MB) {r['exact_match']:g}%" for r in files]
    return (
        f"On the quickstart's adapter ({n} held-out prompts, greedy; ftune's own score {ours['exact_match']:g}%), "
        "llama.cpp scores "
        + ", ".join(parts)
        + ". "
        + _fresh_sentence()
        + "\n\n"
        + _imatrix_sentence().strip()
        + "\n\n" * bool(_imatrix_sentence())
        + provenance("gguf_quickstart", "gguf_quickstart_500")
    )


def _fresh_sentence() -> str:
    """The 500-prompt run in one sentence (gguf_quickstart_500.json)."""
    rows = load("gguf_quickstart_500")["rows"]
    (ours,) = [x for x in rows if x["runtime"] == "ftune"]
    files = ", ".join(f"{_gguf_label(x)} {x['exact_match']:g}%" for x in rows if x["runtime"] == "llama.cpp")
    return (
        f"On {ours['num_prompts']} fresh prompts of the same task, ftune scores {ours['exact_match']:g}% and "
        f"llama.cpp {files}: 100 prompts move a score by several points by chance."
    )


def gguf_types() -> str:
    """docs/checkpoints.md: each file type on the real model (gguf_types.py); speeds only from an idle machine."""
    r = load("gguf_types")
    idle = max(r["load_average_1min"]) < 2.5  # 2 cores: above that, other jobs set the speed
    rows = [
        [f"`{x['type']}`", f"{x['size_bytes'] / 1e6:.0f} MB", f"{x['export_seconds']:g} s",
         f"{x['same_bytes']}/{x['tensors']}", f"{x['perplexity']:.2f}", f"{100 * x['top1_same_as_f32']:.1f}%"]
        + ([f"{x['prompt_tok_s']:.0f}", f"{x['generate_tok_s']:.0f}"] if idle else [])
        for x in r["rows"]
    ]  # fmt: skip
    header = ["`--type`", "file", "export", "tensors byte-equal to llama-quantize's", "perplexity",
              "next token as F32"] + (["prompt tok/s", "generate tok/s"] if idle else [])  # fmt: skip
    load_avg = " to ".join(f"{v:g}" for v in r["load_average_1min"])
    speed = (
        f"on {r['threads']} thread{'s' if r['threads'] != 1 else ''}"
        if idle
        else f"(speeds not shown: other jobs shared the 2 cores, 1-minute load average {load_avg}; rerun on an idle machine)"
    )
    text = (
        f"{r['model']}; perplexity and next-token agreement with the F32 file (perplexity {r['f32_perplexity']:.2f}) "
        f"over the first {r['tokens']} tokens of {r['text']}, in llama.cpp {r['llama_cpp_python']} {speed}."
    )
    return (
        table(header, rows, "lrrrrr" + ("rr" if idle else ""))
        + "\n\n"
        + text
        + "\n\n"
        + provenance("gguf_types")
    )


def gguf_quickstart_500() -> str:
    """docs/checkpoints.md: the same adapter on 500 fresh prompts (gguf_quickstart.py --fresh-heldout 500)."""
    r = load("gguf_quickstart_500")
    (ours,) = [x for x in r["rows"] if x["runtime"] == "ftune"]
    files = [x for x in r["rows"] if x["runtime"] == "llama.cpp"]
    n = ours["num_prompts"]
    rows = [
        [
            "ftune (the adapter merged in fp32)",
            f"{ours['exact_match']:g}% ({ours['num_correct']}/{n})",
            "-",
            "-",
        ]
    ]
    rows += [
        [f"llama.cpp, {_gguf_label(x)}", f"{x['exact_match']:g}% ({x['num_correct']}/{n})",
         f"{x['exact_match'] - ours['exact_match']:+.1f}", f"{x['same_answer_as_ftune']}/{n}"]
        for x in files
    ]  # fmt: skip
    header = ["", f"exact match, {n} fresh prompts", "points from ftune", "same answer as ftune"]
    return table(header, rows, "lrrr") + "\n\n" + provenance("gguf_quickstart_500")
