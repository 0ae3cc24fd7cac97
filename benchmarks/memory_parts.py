"""Where a recipe run's memory goes: rank 0's resident set, glibc's in-use bytes and its held free
bytes at points of the run (after the model is built and sharded, around each loss, backward and
optimizer step). It measured what docs/memory.md's plan counts beside tensor parallel.

    python benchmarks/memory_parts.py full_finetune_single_device --config smollm2/135M_full max_steps=2
    torchrun --standalone --nproc_per_node 3 benchmarks/memory_parts.py full_finetune_distributed \\
        --config smollm2/135M_full tensor_parallel_dim=3 max_steps=2

Linux only (glibc's `mallinfo2`, /proc/self/status). Resident memory beyond glibc's in-use and free
bytes is mapped files (a memory-mapped checkpoint's pages that were read), code and Python's own
arenas. Memory does not depend on the machine's load.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import torch

from ftune import config, registry, training

sys.path.insert(0, str(Path(__file__).resolve().parent))
from glibc_heap import heap_bytes  # noqa: E402

GIB = 2**30
RANK = int(os.environ.get("RANK", "0"))


def report(point: str) -> None:
    """Print rank 0's resident and peak memory, glibc's in-use bytes (heap and mapped) and held free bytes."""
    status = dict(
        line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
    )
    rss, hwm = (int(status[k].split()[0]) * 1024 / GIB for k in ("VmRSS", "VmHWM"))
    in_use, mapped, free = heap_bytes()
    if RANK == 0:
        print(f"{point:28s} rss {rss:6.3f}  peak {hwm:6.3f}  in use {in_use / GIB:6.3f} "
              f"(mapped {mapped / GIB:5.3f})  heap free {free / GIB:6.3f} GiB", flush=True)  # fmt: skip


def _after(name: str, before: bool = False) -> None:
    """Report after (and before) each call of `training.<name>` (recipes look it up at call time)."""
    function = getattr(training, name)

    def reported(*args, **kwargs):
        if before:
            report(f"before {name}")
        out = function(*args, **kwargs)
        report(f"after {name}")
        if name == "build_optimizer":
            out.register_step_pre_hook(lambda *_: report("before optimizer.step"))
            out.register_step_post_hook(lambda *_: report("after optimizer.step"))
        return out

    setattr(training, name, reported)


def main() -> None:
    recipe = sys.argv[1]
    file = Path(recipe) if recipe.endswith(".py") else registry.RECIPES[recipe].file
    for name in ("build_model", "shard_model", "build_optimizer", "token_loss"):
        _after(name, before=name in ("build_model", "token_loss"))
    backward = torch.Tensor.backward

    def reported_backward(self, *args, **kwargs):
        backward(self, *args, **kwargs)
        report("after backward")

    torch.Tensor.backward = reported_backward
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[file.stem] = module
    spec.loader.exec_module(module)
    report("start")
    config.run(module.main, sys.argv[2:], recipe_file=file)
    report("end (the final save included)")


if __name__ == "__main__":
    main()
