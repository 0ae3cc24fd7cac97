"""Greedy generation speed: ftune's KV-cache decoder against transformers' `generate` on the same folder.

    python benchmarks/generate_vs_transformers.py [--new-tokens 128] [--rounds 3] [--home ~/.cache/ftune]

Both load SmolLM2-135M-Instruct (from `ftune convert gguf smollm2`) in fp32 on the CPU and decode the
same chat prompts greedily, batch 1, a fixed number of new tokens (no stop token: the same work for
both), alternating ftune and transformers prompt by prompt in one process. Reported per tool: the
median over prompts and rounds of new tokens per second (prefill included) and of the prefill time
alone (one forward of the prompt), and whether both produced the same tokens (greedy decoding of
the same weights should, until two candidates are near-tied and the two computations round apart:
the results give the first differing position of each generation).

Then the `eval` recipe's path (`--eval-prompts`, batch `--eval-batch`): ftune's `exact_match`
(batched greedy decoding with its stop tokens, as `ftune run eval` does) against transformers'
`generate` on the same prompts, left-padded in batches of the same size, stopping at the same
stop tokens (`eos_token_id`), alternating the two `--rounds` times: prompts a second, and how many
answers are the same text. Writes benchmarks/results/generate_vs_transformers.json.
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


def eval_prompts(n: int) -> list[tuple[list[dict], str]]:
    """`n` date-reformatting prompts (the demo task's kind) with their reference answers."""
    dates = [(2000 + i % 25, 1 + i % 12, 1 + (7 * i) % 28) for i in range(n)]
    return [
        ([{"role": "user", "content": f"Rewrite the date {y}-{m:02d}-{d:02d} in the format DD/MM/YYYY. "
                                      "Answer with the date only."}], f"{d:02d}/{m:02d}/{y}")
        for y, m, d in dates
    ]  # fmt: skip


def eval_speed(
    ours, theirs, tok, folder: Path, n: int, batch: int, new_tokens: int, rounds: int
) -> list[dict]:
    """Prompts a second of ftune's exact_match against transformers' batched generate, same prompts and stops."""
    from ftune.data import Message
    from ftune.evaluation.exact_match import exact_match
    from ftune.models.smollm2 import smollm2_tokenizer

    ftok = smollm2_tokenizer(folder)
    samples = eval_prompts(n)
    ftune_samples = [
        ([Message(role=m["role"], content=m["content"]) for m in msgs], ref) for msgs, ref in samples
    ]
    tok.padding_side = "left"
    seconds: dict[str, list[float]] = {"ftune": [], "transformers": []}
    answers: dict[str, list[str]] = {}
    for _ in range(rounds):
        start = time.perf_counter()
        result = exact_match(ours, ftok, ftune_samples, max_new_tokens=new_tokens, batch_size=batch)
        seconds["ftune"].append(time.perf_counter() - start)
        answers["ftune"] = result.predictions
        start, texts = time.perf_counter(), []
        for i in range(0, n, batch):
            chats = [
                tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False)
                for m, _ in samples[i : i + batch]
            ]
            x = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
            out = theirs.generate(**x, max_new_tokens=new_tokens, do_sample=False, eos_token_id=ftok.stop_tokens,
                                  pad_token_id=tok.pad_token_id or tok.eos_token_id)  # fmt: skip
            texts += tok.batch_decode(out[:, x["input_ids"].shape[1] :], skip_special_tokens=True)
        seconds["transformers"].append(time.perf_counter() - start)
        answers["transformers"] = texts
    same = sum(a.strip() == b.strip() for a, b in zip(answers["ftune"], answers["transformers"]))
    return [
        {"tool": tool, "eval_prompts_per_second": round(n / statistics.median(t), 2),
         "eval_seconds": [round(x, 1) for x in t], "same_answers": f"{same} of {n}"}
        for tool, t in seconds.items()
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("FTUNE_HOME", "~/.cache/ftune")))
    parser.add_argument("--eval-prompts", type=int, default=64)
    parser.add_argument("--eval-batch", type=int, default=32, help="the eval recipe's batch_size")
    parser.add_argument("--eval-new-tokens", type=int, default=16)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "generate_vs_transformers.json"
    )
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ftune.checkpointing import load_hf
    from ftune.generation import generate

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
        evals = eval_speed(ours, theirs, tok, folder, args.eval_prompts, args.eval_batch, args.eval_new_tokens,
                           args.rounds)  # fmt: skip
    load.append(load1())
    import transformers

    rows = [
        {
            "tool": tool,
            "new_tokens_per_second": round(statistics.median(times[tool]), 1),
            "new_tokens_per_second_range": [round(min(times[tool]), 1), round(max(times[tool]), 1)],
            "prefill_ms": round(1000 * statistics.median(prefills[tool]), 1),
        }
        | next(e for e in evals if e["tool"] == tool)
        for tool in times
    ]
    write_results(
        args.out,
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
            "eval": {
                "prompts": args.eval_prompts,
                "batch": args.eval_batch,
                "max_new_tokens": args.eval_new_tokens,
            },
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
