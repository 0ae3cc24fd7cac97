"""What the memory plan's allocator term is a share of (benchmarks/results/heap_retention.json; no run here).

The plan takes the allocator's share of all the transient memory, the tensors glibc maps included
(`ftune.planning.plan.CPU_ALLOCATOR_SHARE`). The results file has to bear that out: where a run maps
part of each layer's saved bytes, the heap keeps no larger a share of all of them than where nothing
is mapped, and a larger share of the heap-served part alone (what an earlier plan counted).
"""

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "heap_retention.json"
ROWS = json.loads(RESULTS.read_text())["rows"]


def test_the_file_covers_both_methods_at_2k_4k_and_8k():
    assert {(r["method"], r["tokens"]) for r in ROWS} >= {
        (m, n) for m in ("full", "lora") for n in (2048, 4096, 8192)
    }


def test_what_the_heap_keeps_follows_the_saved_bytes_not_the_heap_served_ones():
    for method in ("full", "lora"):
        rows = sorted((r for r in ROWS if r["method"] == method), key=lambda r: r["tokens"])
        *shorter, longest = rows
        # the longest row maps part of each layer's saved bytes (the feed-forward's), the shorter ones none ...
        assert longest["mapped_mib_per_layer"] > 0.25 * longest["saved_mib_per_layer"], method
        assert all(r["mapped_mib_per_layer"] == 0 for r in shorter), method
        # ... and the heap keeps no larger a share of all of them than the shorter rows do (a tenth of slack:
        # fresh processes spread), while of the heap-served part alone it keeps more than any shorter row
        most = max(r["kept_share_of_saved"] for r in shorter)
        assert longest["kept_share_of_saved"] <= 1.1 * most, method
        assert longest["kept_share_of_heap_served"] > most, method
