"""The figures of the preference and distillation demos (benchmarks/method_demos.py) on their recipe pages."""

from __future__ import annotations

from figures_common import load, lr_text, minutes, provenance, table


def _row(name: str) -> dict:
    (row,) = [r for r in load("method_demos")["rows"] if r["demo"] == name]
    return row


def _timing(r: dict) -> str:
    load = r["load_average_1min"]
    return (
        f"Command: `{r['command']}`. Training took {minutes(round(r['train_seconds']))} (fp32, one thread; the machine's "
        f"1-minute load average went from {load[0]} to {load[1]}: other jobs shared its two cores, so the time is "
        "not a speed figure; the scores do not depend on it)."
    )


def _em(result: dict) -> str:
    return f"{result['accuracy']:.0%} ({result['num_correct']}/{result['num_total']})"


def dpo_demo() -> str:
    runs = sorted((r for r in load("method_demos")["rows"] if r["demo"] == "dpo"), key=lambda r: -r["lr"])
    first = runs[0]
    rows = [
        [
            "SmolLM2-135M-Instruct, base",
            f"{first['logps_accuracy_before']:.0%}",
            "-",
            _em(first["exact_match_before"]),
        ]
    ]
    rows += [
        [
            f"after {r['steps']} LoRA DPO steps, lr {lr_text(r['lr'])}",
            f"{r['logps_accuracy_after']:.0%}",
            f"{r['rewards_accuracy_after']:.0%} (margin {r['rewards_margin_after']:.2f}, chosen "
            f"{r['rewards_chosen_after']:.2f})",
            _em(r["exact_match_after"]),
        ]
        for r in runs
    ]
    header = [
        "",
        f"held-out pairs ({first['val_pairs']}): chosen more likely",
        "DPO reward accuracy",
        "exact match (greedy, 100 prompts)",
    ]
    timing = "\n".join(f"- {_timing(r)}" for r in runs)
    return table(header, rows, "lrrr") + "\n\n" + timing + "\n\n" + provenance("method_demos", up="../../")


def kd_demo() -> str:
    r = _row("kd")
    rows = [
        ["SmolLM2-135M-Instruct, base (the student before)", _em(r["exact_match_base"])],
        ["teacher: the base with the quickstart's LoRA adapter merged", _em(r["exact_match_teacher"])],
        [
            f"student after {r['steps']} distillation steps (LoRA, kd_ratio 1: no label loss)",
            _em(r["exact_match_student"]),
        ],
    ]
    timing = _timing(r)
    header = ["", "exact match (greedy, 100 held-out prompts)"]
    return table(header, rows, "lr") + "\n\n" + timing + "\n\n" + provenance("method_demos", up="../../")
