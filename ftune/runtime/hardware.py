"""What the run is on: a one-line start-up message (device, dtype) and a warning when the dtype is slow here.

bf16 on a CPU without native bf16 instructions (x86: `avx512_bf16` or `amx_bf16`; Arm: `bf16`) is
emulated: PyTorch converts to fp32 and back around every matrix product, which is far slower than
computing in fp32 directly. Measured on a 2-core AMD EPYC with AVX2 only (512 x 512 matmul,
`python benchmarks/bf16_matmul.py`, benchmarks/results/bf16_matmul.json): bf16 about 12x slower
than fp32, approximate (the machine was busy; docs/glossary.md#mixed-precision).
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import torch

from ftune.runtime.rank import is_rank_zero

# The slowdown of a bf16 matmul against fp32 on a CPU without native bf16, as measured (see above).
EMULATED_BF16_SLOWDOWN = "about 12x"
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: str | None = None) -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (x86 `flags`, Arm `Features`); None where unreadable.

    Args:
        cpuinfo: the text of /proc/cpuinfo; read from the file when None.
    """
    if cpuinfo is None:
        if not CPUINFO.is_file():
            return None
        cpuinfo = CPUINFO.read_text(encoding="utf-8", errors="replace")
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return flags or None


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name ("AMD EPYC"), or platform.processor() where /proc/cpuinfo has none."""
    if cpuinfo is None and CPUINFO.is_file():
        cpuinfo = CPUINFO.read_text(encoding="utf-8", errors="replace")
    for line in (cpuinfo or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name":
            return value.strip()
    return platform.processor() or "unknown CPU"


def native_bf16(device: torch.device, cpuinfo: str | None = None) -> bool | None:
    """Whether `device` computes bf16 natively: True, False, or None when it cannot be told.

    Args:
        device: the run's device.
        cpuinfo: the text of /proc/cpuinfo (tests pass one); read from the file when None.
    """
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return None
    flags = cpu_flags(cpuinfo)
    if flags is None:
        return None
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)


def dtype_name(dtype: torch.dtype) -> str:
    """The setting's name of a dtype: fp32, bf16, fp16 (else torch's)."""
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))


def startup_message(device: torch.device, dtype: torch.dtype, cpuinfo: str | None = None) -> str:
    """One line for the start of a run, e.g. `running on cpu (AMD EPYC, 2 threads) in fp32`."""
    if device.type == "cpu":
        where = f"cpu ({cpu_model(cpuinfo)}, {torch.get_num_threads()} threads)"
    elif device.type == "cuda":
        where = f"{device} ({torch.cuda.get_device_name(device)})"
    else:
        where = str(device)
    return f"running on {where} in {dtype_name(dtype)}"


def dtype_warning(device: torch.device, dtype: torch.dtype, cpuinfo: str | None = None) -> str | None:
    """A warning when `dtype` is slow on `device` (bf16 on a CPU without native bf16), else None."""
    if dtype != torch.bfloat16 or device.type != "cpu" or native_bf16(device, cpuinfo) is not False:
        return None
    return (
        f"dtype=bf16 on a CPU without native bf16 instructions ({cpu_model(cpuinfo)}: none of "
        f"{', '.join(NATIVE_BF16_FLAGS)} in /proc/cpuinfo): PyTorch emulates it, and matrix products run "
        f"{EMULATED_BF16_SLOWDOWN} slower than in fp32 (measured, docs/glossary.md#mixed-precision). "
        "Set dtype=fp32 on this machine."
    )


def describe(device: torch.device, dtype: torch.dtype, cpuinfo: str | None = None) -> list[str]:
    """The start-up line, then the dtype warning if there is one: what a recipe prints first."""
    lines = [startup_message(device, dtype, cpuinfo)]
    if warning := dtype_warning(device, dtype, cpuinfo):
        lines.append(f"warning: {warning}")
    return lines


def announce(device: torch.device, dtype: torch.dtype) -> None:
    """Print :func:`describe`'s lines to stderr on rank zero: what a run prints before it starts."""
    if is_rank_zero():
        for line in describe(device, dtype):
            print(f"ftune: {line}", file=sys.stderr, flush=True)
