"""Record a finished run of qat_experiment.py in benchmarks/results/qat_experiment.json, under "sweep".

    python benchmarks/qat_experiment.py --seeds 0 --lr 2e-4 --out /tmp/qat_lr2e-4
    python benchmarks/qat_record.py /tmp/qat_lr2e-4/results.json --commit <the commit it ran at>

Each sweep entry keeps the run's settings (learning rates, steps, fake-quantization delay), its
perplexities and recovered fractions (each against the full fine-tune of the same run), the machine
and the load on it, and the command that reproduces it. An entry with the same settings and seeds is
replaced; another seed of the same settings is an entry of its own.
docs/qat.md renders the sweep with benchmarks/figures/report.py (block qat_sweep).
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

from figures.common import lr_text
from results_file import ROOT, commit, machine

RESULTS = ROOT / "benchmarks" / "results" / "qat_experiment.json"
KEYS = ("steps", "lr", "lora_lr", "warmup", "fake_quant_after", "batch_size", "seq_len", "methods")
GROUP_SIZE = 32  # qat_experiment.py's default; runs (and sweep entries) from before --group-size used it


def group_size(settings: dict) -> int | None:
    """The int4 group size of a run's settings (None: one scale per output channel), also of one
    recorded before --group-size existed."""
    return settings.get("group_size", GROUP_SIZE)


def learn_ranges(settings: dict) -> bool:
    """Whether a run's QAT learned its ranges (False for one recorded before --learn-ranges existed)."""
    return settings.get("learn_ranges", False)


def group_size_text(settings: dict) -> str:
    """The run's group size as --group-size takes it: an int, or 'channel'."""
    size = group_size(settings)
    return "channel" if size is None else str(size)


def command(settings: dict) -> str:
    """The qat_experiment.py command line that reproduces a run with these settings."""
    args = [
        f"--seeds {' '.join(str(s) for s in settings['seeds'])}",
        f"--methods {' '.join(settings['methods'])}",
    ]
    args += [
        f"--steps {settings['steps']}",
        f"--lr {lr_text(settings['lr'])}",
        f"--warmup {settings['warmup']}",
    ]
    if "qat_lora" in settings["methods"]:
        args.append(f"--lora-lr {lr_text(settings['lora_lr'])}")
    if settings["fake_quant_after"] is not None:
        args.append(f"--fake-quant-after {settings['fake_quant_after']}")
    if group_size(settings) != GROUP_SIZE:
        args.append(f"--group-size {group_size_text(settings)}")
    if learn_ranges(settings):
        args.append("--learn-ranges")
    return "python benchmarks/qat_experiment.py " + " ".join(args)


def merged(sweep: list[dict], entry: dict) -> list[dict]:
    """The sweep with `entry` in it: replacing the entry of the same settings and seeds, if any."""

    def key(e: dict) -> tuple:
        settings = e["settings"]
        return settings | {
            "group_size": group_size(settings),
            "learn_ranges": learn_ranges(settings),
        }, sorted(e["seeds"])

    kept = [e for e in sweep if key(e) != key(entry)]
    return sorted([*kept, entry], key=order)


def order(e: dict) -> tuple:
    """Where an entry stands in the sweep: by lr, steps, delay, group size (per channel last), learned
    ranges, then seeds, so that runs differing in one setting stand together."""
    s, size = e["settings"], group_size(e["settings"])
    return (s["lr"], s["steps"], s["fake_quant_after"] or 0, size is None, size or 0, learn_ranges(s),
            sorted(e["seeds"]))  # fmt: skip


def _borrow_full(run: dict, other: dict, path: Path) -> None:
    """Take the full fine-tune's perplexities from `other` (the same full fine-tune) and recompute the fractions."""
    same = ("steps", "lr", "warmup", "batch_size", "seq_len")
    mine, theirs = run["settings"], other["settings"]
    if (
        "full" not in theirs["methods"]
        or any(mine[k] != theirs[k] for k in same)
        or group_size(mine) != group_size(theirs)  # its PTQ is at the group size of this run
    ):
        raise SystemExit(
            f"qat_record: {path} has no full fine-tune with this run's {', '.join(same)} "
            f"({ {k: mine[k] for k in same} }, group size {group_size_text(mine)}); rerun with "
            "--methods full qat instead."
        )
    from qat_experiment import recovered_fractions

    run["settings"] = {**mine, "methods": ["full", *mine["methods"]], "full_from": str(path)}
    for seed, r in run["runs"].items():
        ref = other["runs"][seed]["perplexity"]
        r["perplexity"] = {"float_full": ref["float_full"], "ptq_full": ref["ptq_full"], **r["perplexity"]}
        r.update(recovered_fractions(r["perplexity"]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", type=Path, help="the results.json qat_experiment.py wrote in its --out")
    parser.add_argument("--commit", default=None, help="the commit the run was made at (default: HEAD)")
    parser.add_argument("--load", default="", help="the load on the machine during the run, as seen")
    parser.add_argument(
        "--full-from",
        type=Path,
        default=None,
        help="a results.json whose full fine-tune (same seed, lr, steps, batch) is this QAT-only run's reference",
    )
    args = parser.parse_args()
    run = json.loads(args.results.read_text())
    settings = run["settings"]
    if args.full_from is not None:
        _borrow_full(run, json.loads(args.full_from.read_text()), args.full_from)
    entry = {
        "settings": {k: settings[k] for k in KEYS}
        | {"group_size": group_size(settings), "learn_ranges": learn_ranges(settings)},
        "command": command(settings)
        + (
            f" (its full fine-tune: --full-from {args.full_from.parent.name}/{args.full_from.name})"
            if args.full_from
            else ""
        ),
        "commit": args.commit or commit(),
        "date": date.today().isoformat(),
        "machine": {**machine(), "torchao": run["machine"]["torchao"]},
        "total_seconds": run["total_seconds"],
        "load": args.load,
        "seeds": {
            seed: {"perplexity": r["perplexity"], **{k: v for k, v in r.items() if k.startswith("recovered")}}
            for seed, r in run["runs"].items()
        },
    }
    results = json.loads(RESULTS.read_text())
    results["sweep"] = merged(results.get("sweep", []), entry)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"recorded {entry['command']} in {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
