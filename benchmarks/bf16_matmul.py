"""How much slower a bf16 matrix product is than fp32 on this CPU (the figure ftune's bf16 warning quotes).

    python benchmarks/bf16_matmul.py                       # prints the times and the ratio
    python benchmarks/bf16_matmul.py --json benchmarks/results/bf16_matmul.json

On a CPU without native bf16 (no avx512_bf16 / amx_bf16) PyTorch emulates bf16 and the ratio is
large; with native bf16 it is below 1. Small (512 x 512) so that it answers in seconds.
"""

import argparse
import statistics
import time
from pathlib import Path

import torch
from results_file import write_results


def seconds_per_matmul(dtype: torch.dtype, size: int, repeats: int) -> float:
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results file here")
    parser.add_argument("--note", help="the results file's note (e.g. how busy the machine was)")
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        fp32 = seconds_per_matmul(torch.float32, args.size, 20)
        bf16 = seconds_per_matmul(torch.bfloat16, args.size, 3)
        runs.append(
            {"fp32_ms": round(fp32 * 1e3, 2), "bf16_ms": round(bf16 * 1e3, 2), "ratio": round(bf16 / fp32, 1)}
        )
        print(f"fp32 {fp32 * 1e3:.2f} ms, bf16 {bf16 * 1e3:.2f} ms: bf16 is {bf16 / fp32:.1f}x the fp32 time")
    median = statistics.median(r["ratio"] for r in runs)
    print(f"median ratio {median:.1f}x")
    if args.json:
        note = "" if args.note is None else args.note
        write_results(args.json, "bf16_matmul", runs, note=note, size=args.size)


if __name__ == "__main__":
    main()
