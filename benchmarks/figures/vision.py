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


def _run_text(r: dict) -> str:
    return (
        f"`{r['command']}`: {r['steps']} steps of {r['batch_size']} questions (lr {r['lr']:g}, "
        f"{r['steps'] * r['batch_size'] / r['n_train']:.1f} epochs of the {r['n_train']} training questions) in "
        f"{minutes(round(r['train_seconds']))}; the loss (a mean over each answer's tokens, the assistant "
        f"turn's opening included) went from {r['loss_first10']} over the first 10 steps to {r['loss_last10']} "
        f"over the last 10. {r['note']}"
    )


def vision_demo() -> str:
    """Held-out exact match of the composed VLM before and after each run, per question kind; what images
    cost a step (the first run's batch)."""
    results = load("vision_demo")
    runs = results["rows"]
    first = runs[0]
    header = ["", "all", *KINDS]
    before = first["exact_match_before"]
    rows = [["before (random encoder and projector)", *(_pct(before[k]) for k in ("all", *KINDS))]]
    for r in runs:
        after = r["exact_match_after"]
        rows.append([f"after {r['steps']} steps, lr {r['lr']:g}", *(_pct(after[k]) for k in ("all", *KINDS))])
    rows.append(["a guess among the kind's answers", *(_pct(CHANCE[k]) for k in ("all", *KINDS))])
    p = first["parameters"]
    above = {k for r in runs for k in KINDS if r["exact_match_after"][k] > CHANCE[k] + 0.1}
    verdict = (
        f"Above a guess by more than 10 points (in some run) only on {' and '.join(k for k in KINDS if k in above)}"
        if above
        else "No better than a guess on any kind"
    ) + (
        ": the model learnt the answers' form (it scored 0% before), and in these runs little of "
        "what the images show. The encoder and projector start random and the runs had the minutes of a "
        "shared CPU, well under an epoch; longer runs, or a pretrained SigLIP encoder "
        "(`ftune.models.llava.siglip_hf_to_ftune`), are what to try."
    )
    notes = (
        f"{first['model']}: {p['encoder'] / 1e6:.1f}M encoder and {p['projector'] / 1e6:.2f}M projector "
        f"parameters trained fully, {p['decoder_lora'] / 1e6:.1f}M LoRA parameters on the "
        f"{p['decoder'] / 1e6:.0f}M decoder. Exact match is greedy, on {first['n_heldout']} held-out questions "
        "whose layouts training never saw, a quarter of each kind. "
        + verdict
        + "\n\n"
        + "\n".join(f"- {_run_text(r)}" for r in runs)
    )
    cost = first["images_vs_text"]
    img, txt = cost["images"], cost["text_only"]
    cost_rows = [
        ["with its images", f"{img['step_seconds']:.2f} s", f"{img['peak_rss_gib']:.2f} GiB"],
        ["image tokens as text, no images", f"{txt['step_seconds']:.2f} s", f"{txt['peak_rss_gib']:.2f} GiB"],
    ]
    cost_text = (
        f"One training batch of the first run ({cost['batch_size']} samples, {cost['tokens']} token positions "
        f"of which {cost['image_tokens']} are image tokens): the median of {_repeats(first['command'])} steps "
        "(forward, backward, optimizer step) and the peak RSS over them, against the same batch with every "
        f"image token replaced by a text token and no images: images make a step {cost['step_ratio']:.2f} "
        "times as long (the encoder is small beside the decoder; on a loaded machine the difference is "
        "within the noise)."
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
