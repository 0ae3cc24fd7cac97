"""Greedy generation speed: ftune's KV-cache decoder against transformers' `generate` on the same folder.

    python benchmarks/generate_vs_transformers.py [--new-tokens 128] [--rounds 3] [--home ~/.cache/ftune]

Both load SmolLM2-135M-Instruct (from `ftune convert gguf smollm2`) in fp32 on the CPU and decode the
same chat prompts greedily, batch 1, a fixed number of new tokens (no stop token: the same work for
both), alternating ftune and transformers prompt by prompt in one process. Reported per tool: the
median over prompts and rounds of new tokens per second (prefill included) and of the prefill time
alone (one forward of the prompt), and whether both produced the same tokens (greedy decoding of
the same weights should, until two candidates are near-tied and the two computations round apart:
the results give the first differing position of each generation). Writes
benchmarks/results/generate_vs_transformers.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
from results_file import ROOT, load1, write_results

MODEL = "SmolLM2-135M-Instruct"
PROMPTS = [
    "Rewrite the date 2023-07-14 in the format DD/MM/YYYY. Answer with the date only.",
    "Explain in three sentences what a hash table is.",
    "Write a short poem about the sea.",
    "List five uses of a paperclip.",
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "~/.cache/ftune")))
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ftune.generation import generate
    from ftune.models import load_hf

    folder = args.home.expanduser() / "models" / MODEL
    torch.manual_seed(0)
    ours = load_hf(folder, dtype=torch.float32).eval()
    theirs = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    texts = [
        tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in PROMPTS
    ]
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    n = args.new_tokens

    def run_ftune(ids: list[int]) -> tuple[list[int], float]:
        start = time.perf_counter()
        out = generate(ours, ids, max_new_tokens=n)
        return out, time.perf_counter() - start

    def run_hf(ids: list[int]) -> tuple[list[int], float]:
        x = torch.tensor([ids])
        start = time.perf_counter()
        out = theirs.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None,
                              pad_token_id=tok.eos_token_id)  # fmt: skip
        return out[0, len(ids) :].tolist(), time.perf_counter() - start

    def prefill(tool: str, ids: list[int]) -> float:
        x = torch.tensor([ids])
        start = time.perf_counter()
        with torch.inference_mode():
            ours(x) if tool == "ftune" else theirs(x)
        return time.perf_counter() - start

    times: dict[str, list[float]] = {"ftune": [], "transformers": []}
    prefills: dict[str, list[float]] = {"ftune": [], "transformers": []}
    same, load = [], [load1()]
    with torch.inference_mode():
        run_ftune(prompts[0]), run_hf(prompts[0])  # warm-up: first-call allocations, lazy imports
        for _ in range(args.rounds):
            for ids in prompts:
                a, ta = run_ftune(ids)
                b, tb = run_hf(ids)
                times["ftune"].append(n / ta)
                times["transformers"].append(n / tb)
                same.append(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))))
                for tool in times:
                    prefills[tool].append(prefill(tool, ids))
    load.append(load1())
    import transformers

    rows = [
        {
            "tool": tool,
            "new_tokens_per_second": round(statistics.median(times[tool]), 1),
            "new_tokens_per_second_range": [round(min(times[tool]), 1), round(max(times[tool]), 1)],
            "prefill_ms": round(1000 * statistics.median(prefills[tool]), 1),
        }
        for tool in times
    ]
    write_results(
        ROOT / "benchmarks" / "results" / "generate_vs_transformers.json",
        "generate_vs_transformers",
        rows,
        note=f"transformers {transformers.__version__}; threads {torch.get_num_threads()}",
        workload={
            "model": MODEL,
            "prompts": len(PROMPTS),
            "rounds": args.rounds,
            "new_tokens": n,
            "prompt_tokens": [len(p) for p in prompts],
            "dtype": "fp32",
            "batch": 1,
        },  # fmt: skip
        same_tokens=f"{sum(s == n for s in same)} of {len(same)} generations identical; the first differing "
        f"position, per generation: {same}",
        load_average_1min=load,
    )
    for r in rows:
        print(r)
    print(f"identical: {sum(s == n for s in same)} of {len(same)}; first difference at {same}; load {load}")


if __name__ == "__main__":
    main()
