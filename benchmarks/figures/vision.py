"""The image demo's figures (benchmarks/vision_demo.py) for docs/images.md."""

from __future__ import annotations

from figures.common import load, minutes, provenance, table

KINDS = ("colour", "shape", "count", "position")
FIXED = "transformers' SigLIP"  # the encoder's initialisation since SiglipVisionEncoder.reset_parameters


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _repeats(command: str) -> str:
    """The steps each step time is the median of (vision_demo.py's --repeats, 5 unless given)."""
    words = command.split()
    return words[words.index("--repeats") + 1] if "--repeats" in words else "5"


def _threads(command: str) -> int:
    """The threads a run's command gave torch (OMP_NUM_THREADS=N before it; 1 unless given)."""
    for word in command.split():
        if word.startswith("OMP_NUM_THREADS="):
            return int(word.split("=", 1)[1])
    return 1


def _run_text(r: dict) -> str:
    lrs = f"lr {r['lr']:g}" + (f", encoder and projector {r['vision_lr']:g}" if "vision_lr" in r else "")
    return (
        f"`{r['command']}`: {r['steps']} steps of {r['batch_size']} questions ({lrs}, "
        f"{r['steps'] * r['batch_size'] / r['n_train']:.1f} epochs of the {r['n_train']} training questions) in "
        f"{minutes(round(r['train_seconds']))}; the loss (a mean over each answer's tokens, the assistant "
        f"turn's opening included) went from {r['loss_first10']} over the first 10 steps to {r['loss_last10']} "
        f"over the last 10. {r['note']}"
    )


def _baselines(run: dict) -> tuple[dict[str, float], dict[str, float]]:
    """Chance and the best constant answer per kind (and over the four kinds in equal parts)."""
    chance = {k: run["baselines"][k]["chance"] for k in KINDS}
    constant = {k: run["baselines"][k]["constant"] for k in KINDS}
    chance["all"], constant["all"] = sum(chance.values()) / 4, sum(constant.values()) / 4
    return chance, constant


def _scores(label: str, scores: dict[str, float]) -> list[str]:
    return [label, *(_pct(scores[k]) for k in ("all", *KINDS))]


def _layers(r: dict) -> int:
    """The encoder's transformer layers in run `r` (rows before the option ran with 4)."""
    return r.get("vision_layers", 4)


def _after(r: dict) -> str:
    encoder = "patch embeddings only (0 layers)" if _layers(r) == 0 else f"{_layers(r)} encoder layers"
    return f"after {r['steps']} steps, {encoder}"


def _verdict(run: dict, constant: dict[str, float], n_kind: int) -> str:
    """Which kinds the run answers above the best constant answer, by how much."""
    after = run["exact_match_after"]
    above = [k for k in KINDS if after[k] > constant[k]]
    epochs = f"{run['steps'] * run['batch_size'] / run['n_train']:.1f} epochs"
    if not above:
        return f"On no kind above the best constant answer after {epochs}: the model learnt the answers' form only."
    gaps = ", ".join(f"{k} by {100 * (after[k] - constant[k]):.0f} points" for k in above)
    rest = [k for k in KINDS if k not in above]
    return (
        f"After {epochs} the patch-embedding model is above the best constant answer on "
        + ("every kind" if not rest else " and ".join(above))
        + f" ({gaps}; {n_kind} questions a kind: a gap under about 14 points is within what chance moves)"
        + (f", and not on {' and '.join(rest)}" if rest else "")
        + ": it reads the images."
    )


def vision_demo() -> str:
    """Held-out exact match of the composed VLM before and after training, per question kind, against
    chance and the best constant answer; the runs before the encoder's initialisation was fixed; what
    images cost a step."""
    results = load("vision_demo")
    runs = [r for r in results["rows"] if r["encoder_init"] == FIXED]
    old = [r for r in results["rows"] if r["encoder_init"] != FIXED]  # PyTorch's default initialisation
    first = runs[0]
    chance, constant = _baselines(first)
    rows = [_scores("before (random encoder and projector)", first["exact_match_before"])]
    runs.sort(key=lambda r: (_layers(r) != 0, r["steps"] * r["batch_size"]))  # the shipped encoder first
    rows += [_scores(_after(r), r["exact_match_after"]) for r in runs]
    rows += [_scores("chance: a guess among the kind's answers", chance)]
    rows += [_scores("the best constant answer (the answers' prior)", constant)]
    shipped = [r for r in runs if _layers(r) == 0]
    deep = [r for r in runs if _layers(r) != 0]
    n_kind = first["n_heldout"] // len(KINDS)
    verdict = _verdict(max(shipped, key=lambda r: r["steps"]), constant, n_kind) if shipped else ""
    if deep:
        longest = max(deep, key=lambda r: r["steps"] * r["batch_size"])
        above = [k for k in KINDS if longest["exact_match_after"][k] > constant[k]]
        verdict += (
            f" The runs with {_layers(longest)} random transformer layers on top were shorter "
            f"({longest['steps'] * longest['batch_size'] / first['n_train']:.1f} epochs at most) and stayed "
            + (f"within {max(100 * (longest['exact_match_after'][k] - constant[k]) for k in above):.0f} points"
               if above else "below")
            + " of the answers' prior on every kind: random layers mix the 9 cells before they have learnt "
            "anything. The table does not compare the two encoders at equal steps. Beyond this demo, start "
            "from a pretrained SigLIP encoder (`ftune.models.llava.siglip_hf_to_ftune`)."
        )  # fmt: skip
    p = (shipped or runs)[0]["parameters"]
    notes = (
        f"SmolLM2-135M-Instruct + a random SigLIP-style encoder (width 192, 48 px, 16 px patches: 9 image "
        "tokens, one a cell of the task's grid), initialised as transformers initialises SigLIP, + an MLP "
        f"projector: {p['encoder'] / 1e6:.2f}M encoder and {p['projector'] / 1e6:.2f}M projector parameters "
        f"trained fully, {p['decoder_lora'] / 1e6:.1f}M LoRA parameters on the {p['decoder'] / 1e6:.0f}M decoder. "
        f"Exact match is greedy, on {first['n_heldout']} held-out questions whose layouts training never saw, "
        "a quarter of each kind; the best constant answer is the share of the kind's most frequent answer "
        "among them. " + verdict + "\n\n" + "\n".join(f"- {_run_text(r)}" for r in runs)
    )
    if old:
        old_rows = [_scores(f"after {r['steps']} steps, lr {r['lr']:g}", r["exact_match_after"]) for r in old]
        old_rows.append(_scores("the best constant answer", _baselines(old[0])[1]))
        notes += (
            "\n\nBefore the encoder's initialisation was fixed (PyTorch's defaults drew the position "
            "embeddings from N(0, 1), 14 times SigLIP's spread, so the encoder's output hardly depended on "
            f"the pixels), on {old[0]['n_heldout']} held-out questions: no kind above the best constant "
            "answer:\n\n"
            + table(["", "all", *KINDS], old_rows, "lrrrrr")
            + "\n\n"
            + "\n".join(f"- {_run_text(r)}" for r in old)
        )
    # What images cost a step: the shipped encoder's run, else the one whose load was lowest at its end
    # (the cost is timed last).
    timed = shipped[0] if shipped else min(runs, key=lambda r: r.get("load1_end", float("inf")))
    cost = timed["images_vs_text"]
    img, txt = cost["images"], cost["text_only"]
    cost_rows = [
        ["with its images", f"{img['step_seconds']:.2f} s", f"{img['peak_rss_gib']:.2f} GiB"],
        ["image tokens as text, no images", f"{txt['step_seconds']:.2f} s", f"{txt['peak_rss_gib']:.2f} GiB"],
    ]
    threads = _threads(timed["command"])
    idle = timed.get("load1_end", float("inf")) < threads + 0.5  # its own threads only: nothing else ran
    cost_text = (
        f"One training batch of the {timed['steps']}-step run ({cost['batch_size']} samples, {cost['tokens']} token "
        f"positions of which {cost['image_tokens']} are image tokens): the median of {_repeats(timed['command'])} "
        "steps (forward, backward, optimizer step) and the peak RSS over them, against the same batch with every "
        "image token replaced by a text token and no images: "
        + (
            f"images cost no time the {_repeats(timed['command'])} steps can tell ({cost['step_ratio']:.2f} times as long)"
            if abs(cost["step_ratio"] - 1) < 0.05
            else f"images make a step {cost['step_ratio']:.2f} times as long"
        )
        + (
            f" ({threads} thread{'s' if threads > 1 else ''}, 1-minute load {timed['load1_end']:g}: nothing else "
            "ran; the encoder is small beside the decoder)."
            if idle
            else " (measured on a loaded, shared machine: not a speed figure; the encoder is small beside the decoder)."
        )
    )
    return (
        table(["", "all", *KINDS], rows, "lrrrrr")
        + "\n\n"
        + notes
        + "\n\n"
        + table(["batch", "step time", "peak RSS"], cost_rows, "lrr")
        + "\n\n"
        + cost_text
        + "\n\n"
        + provenance("vision_demo", up="../")
    )
