"""The image demo's figures (benchmarks/vision_demo.py) for docs/images.md."""

from __future__ import annotations

from figures.common import load, minutes, provenance, table

KINDS = ("colour", "shape", "count", "position")
# Exact match of a guess among each kind's answers (ftune.datasets.image_task.ANSWERS: 4 colours, 3 shapes,
# counts 1 to 4, left or right), and of all four kinds in equal parts.
CHANCE = {"colour": 1 / 4, "shape": 1 / 3, "count": 1 / 4, "position": 1 / 2}
CHANCE["all"] = sum(CHANCE.values()) / 4


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _repeats(command: str) -> str:
    """The steps each step time is the median of (vision_demo.py's --repeats, 5 unless given)."""
    words = command.split()
    return words[words.index("--repeats") + 1] if "--repeats" in words else "5"


def vision_demo() -> str:
    """Held-out exact match of the composed VLM before and after, per question kind; what images cost a step."""
    results = load("vision_demo")
    r = results["rows"][0]
    before, after = r["exact_match_before"], r["exact_match_after"]
    header = ["", "all", *KINDS]
    rows = [
        ["before (random encoder and projector)", *(_pct(before[k]) for k in ("all", *KINDS))],
        [f"after {r['steps']} steps", *(_pct(after[k]) for k in ("all", *KINDS))],
        ["a guess among the kind's answers", *(_pct(CHANCE[k]) for k in ("all", *KINDS))],
    ]
    seeing = after["all"] > CHANCE["all"] + 0.1
    verdict = (
        "The model answers above a guess: it learnt to read the images."
        if seeing
        else "After these steps the model answers no better than a guess among each kind's answers "
        "(it scored 0% before: it has learnt the answers' form): in this run it did not learn to see (its encoder and projector start random; the run had "
        "the minutes of a shared CPU, well under an epoch). Longer runs, or a pretrained SigLIP encoder "
        "(`ftune.models.llava.siglip_hf_to_ftune`), are what to try."
    )
    p = r["parameters"]
    cost = r["images_vs_text"]
    img, txt = cost["images"], cost["text_only"]
    notes = (
        f"{r['model']}: {p['encoder'] / 1e6:.1f}M encoder and {p['projector'] / 1e6:.2f}M projector parameters "
        f"trained fully, {p['decoder_lora'] / 1e6:.1f}M LoRA parameters on the {p['decoder'] / 1e6:.0f}M decoder. "
        f"{r['steps']} steps of {r['batch_size']} questions (lr {r['lr']:g}, "
        f"{r['steps'] * r['batch_size'] / r['n_train']:.1f} epochs of the {r['n_train']} training questions) took "
        f"{minutes(round(r['train_seconds']))}; the loss went from {r['loss_first10']} (mean of the first 10 "
        f"steps) to {r['loss_last10']} (the last 10). Exact match is greedy, on {r['n_heldout']} held-out "
        "questions whose layouts training never saw, a quarter of each kind. " + verdict
    )
    cost_rows = [
        ["with its images", f"{img['step_seconds']:.2f} s", f"{img['peak_rss_gib']:.2f} GiB"],
        ["image tokens as text, no images", f"{txt['step_seconds']:.2f} s", f"{txt['peak_rss_gib']:.2f} GiB"],
    ]
    cost_text = (
        f"One training batch ({cost['batch_size']} samples, {cost['tokens']} token positions of which "
        f"{cost['image_tokens']} are image tokens): the median of {_repeats(results['command'])} steps "
        "(forward, backward, optimizer step) and the peak RSS over them, against the same batch with every "
        f"image token replaced by a text token and no images: images make a step {cost['step_ratio']:.2f} "
        "times as long. "
        f"{results['note']}"
    )
    return (
        table(header, rows, "lrrrrr")
        + "\n\n"
        + notes
        + "\n\n"
        + table(["batch", "step time", "peak RSS"], cost_rows, "lrr")
        + "\n\n"
        + cost_text
        + "\n\n"
        + provenance("vision_demo", up="../")
    )
