"""The quickstart measured: exact match before and after its LoRA run, and how long each part takes.

    python benchmarks/quickstart.py [smollm2|gemma3]             # runs ./quickstart.sh, then writes the results
    python benchmarks/quickstart.py gemma3 --ingest output/quickstart_gemma3 --seconds 490
                                                                  # a finished run's folder, timed by hand

Writes benchmarks/results/quickstart.json (smollm2) or quickstart_<model>.json, from which
benchmarks/figures/report.py generates the figures of docs/quickstart.md and README.md. The eval times are the
eval recipe's own (the `seconds` of base.json / tuned.json); the training time and tokens/s are the
quickstart's own (its summary.json: the wall time of the `ftune run` and the median of the logged steps).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import yaml
from results_file import ROOT, load1, write_results

CONFIGS = {
    "smollm2": ("smollm2/135M_lora", "SmolLM2-135M-Instruct"),
    "gemma3": ("gemma3/270M_lora", "gemma-3-270m"),
}


def summarise(out: Path, model: str, total_seconds: float, load: list[float]) -> dict:
    """One results row from a quickstart output folder (summary.json, base.json, tuned.json, the config)."""
    summary = json.loads((out / "summary.json").read_text())
    base, tuned = (json.loads((out / f).read_text())["exact_match"] for f in ("base.json", "tuned.json"))
    config, folder = CONFIGS[model]
    cfg = yaml.safe_load((ROOT / "recipes" / "configs" / f"{config}.yaml").read_text())
    return {
        "model": folder,
        "config": config,
        "base_exact_match": round(100 * summary["base_exact_match"]),
        "tuned_exact_match": round(100 * summary["tuned_exact_match"]),
        "num_prompts": summary["num_prompts"],
        "steps": summary["steps"],
        "batch_size": cfg["batch_size"],
        "lora_rank": cfg["peft"]["rank"],
        "base_eval_seconds": round(base["seconds"]),
        "train_seconds": summary["train_seconds"],
        "train_tok_s": round(summary["train_tok_s"]),
        "tuned_eval_seconds": round(tuned["seconds"]),
        "after_setup_seconds": round(total_seconds),
        "load_average_1min": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", nargs="?", default="smollm2", choices=sorted(CONFIGS))
    parser.add_argument(
        "--ingest", type=Path, help="a finished quickstart output folder: do not run it again"
    )
    parser.add_argument("--seconds", type=float, help="with --ingest: the run's wall time, measured by hand")
    parser.add_argument("--load", type=float, nargs="*", default=[], help="with --ingest: 1-min loads seen")
    parser.add_argument("--note", default="", help="what else to record (e.g. what shared the machine)")
    args = parser.parse_args()
    if args.ingest:
        if args.seconds is None:
            parser.error("--ingest needs --seconds (the run's wall time)")
        out, seconds, load = args.ingest, args.seconds, args.load
    else:
        out = ROOT / "output" / f"quickstart_{args.model}"  # ./quickstart.sh <model> writes there
        load, start = [load1()], time.perf_counter()
        subprocess.run(["./quickstart.sh", args.model], cwd=ROOT, check=True)
        seconds = time.perf_counter() - start
        load.append(load1())
    name = "quickstart" if args.model == "smollm2" else f"quickstart_{args.model}"
    write_results(ROOT / "benchmarks" / "results" / f"{name}.json", name, [summarise(out, args.model, seconds, load)],
                  note=args.note)  # fmt: skip


if __name__ == "__main__":
    main()
