"""How much slower a bf16 matrix product is than fp32 on this CPU (the figure ftune's bf16 warning quotes).

    python benchmarks/bf16_matmul.py                       # prints the times and the ratio
    python benchmarks/bf16_matmul.py --json benchmarks/results/bf16_matmul.json

On a CPU without native bf16 (no avx512_bf16 / amx_bf16) PyTorch emulates bf16 and the ratio is
large; with native bf16 it is below 1. Small (512 x 512) so that it answers in seconds.
"""

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ftune.training.hardware import cpu_flags, cpu_model, native_bf16  # noqa: E402


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
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        flags = cpu_flags() or set()
        result = {
            "benchmark": "bf16_matmul",
            "commit": commit,
            "date": date.today().isoformat(),
            "command": " ".join(["python", "benchmarks/bf16_matmul.py", *sys.argv[1:]]),
            "machine": {
                "cpu": cpu_model(),
                "threads": torch.get_num_threads(),
                "flags": sorted(f for f in flags if f.startswith(("avx", "amx")) or f == "bf16"),
                "native_bf16": native_bf16(torch.device("cpu")),
                "python": platform.python_version(),
                "torch": torch.__version__,
            },
            "size": args.size,
            "note": "",
            "rows": runs,
        }
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
