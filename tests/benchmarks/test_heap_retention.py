"""What the memory plan's allocator term is a share of (benchmarks/results/heap_retention.json; no run here).

The plan takes the allocator's share of all the transient memory, the tensors glibc maps included
(`ftune.planning.plan.CPU_ALLOCATOR_SHARE`). The results file has to bear that out: at every length the
heap keeps less than that share of a layer's saved bytes, no larger a share at the longest rows (where
part of them is mapped) than at the shorter ones, and a share of the heap-served bytes alone (what an
earlier plan counted) falls short there for at least one method.
"""

import json
from pathlib import Path

from ftune.planning.plan import CPU_ALLOCATOR_SHARE

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "heap_retention.json"
ROWS = json.loads(RESULTS.read_text())["rows"]
METHODS = ("full", "lora")


def _by_length(method: str) -> tuple[list[dict], dict]:
    rows = sorted((r for r in ROWS if r["method"] == method), key=lambda r: r["tokens"])
    return rows[:-1], rows[-1]


def test_the_file_covers_both_methods_at_2k_4k_and_8k():
    assert {(r["method"], r["tokens"]) for r in ROWS} >= {(m, n) for m in METHODS for n in (2048, 4096, 8192)}


def test_the_heap_keeps_less_than_the_plans_share_of_the_saved_bytes_at_every_length():
    over = {
        (r["method"], r["tokens"]): r["kept_share_of_saved"]
        for r in ROWS
        if r["kept_share_of_saved"] > CPU_ALLOCATOR_SHARE
    }
    assert not over, over


def test_at_the_longest_rows_part_is_mapped_and_the_heap_keeps_no_larger_share_of_all():
    for method in METHODS:
        shorter, longest = _by_length(method)
        assert longest["mapped_mib_per_layer"] > 0.25 * longest["saved_mib_per_layer"], method
        assert all(r["mapped_mib_per_layer"] == 0 for r in shorter), method
        # a tenth of slack: fresh processes spread (each row's runs are in the file)
        assert longest["kept_share_of_saved"] <= 1.1 * max(r["kept_share_of_saved"] for r in shorter), method


def test_a_share_of_the_heap_served_bytes_alone_falls_short_at_the_longest_rows():
    short = {}
    for method in METHODS:
        shorter, longest = _by_length(method)
        most = max(r["kept_share_of_saved"] for r in shorter)  # where nothing is mapped, both shares are one
        short[method] = longest["kept_share_of_heap_served"] / most
    assert max(short.values()) > 1.25, short
