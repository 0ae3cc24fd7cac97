"""Peak memory of the run: process RSS on every device, plus the allocator's peaks on GPUs."""

import sys
from pathlib import Path

import torch

try:
    import resource  # used only off Linux
except ImportError:  # Windows
    resource = None

GIB = 1024**3


def _peak_rss_bytes() -> int:
    # VmHWM ("high water mark") is the peak resident set size on Linux.
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # "VmHWM:   123456 kB"
    except OSError:
        pass
    if resource is None:
        raise OSError(
            "peak memory needs /proc/self/status (Linux) or Python's resource module (macOS, other Unixes); "
            "this platform has neither."
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def peak_memory_gib(device: torch.device | str) -> dict[str, float]:
    """Peak memory since the start of the process (or the last :func:`reset_peak_memory`), in GiB.

    Args:
        device: the training device.

    Returns:
        ``{"peak_rss_gib": ...}`` for the process, plus ``peak_allocated_gib`` and
        ``peak_reserved_gib`` (caching allocator) on CUDA, and ``driver_allocated_gib`` (current,
        MPS has no peak counter) on MPS.
    """
    device = torch.device(device)
    stats = {"peak_rss_gib": _peak_rss_bytes() / GIB}
    if device.type == "cuda":
        stats["peak_allocated_gib"] = torch.cuda.max_memory_allocated(device) / GIB
        stats["peak_reserved_gib"] = torch.cuda.max_memory_reserved(device) / GIB
    elif device.type == "mps":
        stats["driver_allocated_gib"] = torch.mps.driver_allocated_memory() / GIB
    return stats


def reset_peak_memory(device: torch.device | str) -> None:
    """Start a new peak measurement, e.g. after loading the model, to measure training alone.

    Resets CUDA's allocator peaks, and on Linux the process's peak RSS (``/proc/self/clear_refs``);
    elsewhere the RSS peak cannot be reset and keeps counting from process start.

    Args:
        device: the training device.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        Path("/proc/self/clear_refs").write_text("5")  # "5" resets VmHWM to the current RSS
    except OSError:
        pass
