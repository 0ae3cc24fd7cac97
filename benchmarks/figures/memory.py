"""The memory plan's table (docs/memory.md): `ftune plan`'s prediction beside the measured peak of real runs."""

from __future__ import annotations

from figures.common import load, provenance, table


def _setting(row: dict) -> str:
    keep = (
        "batch_size=",
        "tokenizer.max_seq_len=",
        "activation_checkpointing=",
        "group_size=",
        "max_new_tokens=",
        "context_parallel_dim=",
        "tensor_parallel_dim=",
    )
    parts = [o for o in row["overrides"] if o.startswith(keep)]
    if any(o.startswith("optimizer._component_=") for o in row["overrides"]):
        parts.append("AdamWBf16State")
    return " ".join(f"`{p}`" for p in parts)


def memory_plan() -> str:
    """Each run: recipe, config, layers, ranks, the settings that differ, measured and predicted peak, error."""
    r = load("memory_plan")
    rows = [
        [
            row["recipe"],
            row["config"],
            row["layers"],
            row["world_size"],
            _setting(row),
            f"{row['measured_gib']:.2f}",
            f"{row['predicted_gib']:.2f}",
            f"{row['error']:+.1%}",
        ]
        for row in r["rows"]
    ]
    header = [
        "recipe",
        "config",
        "layers",
        "ranks",
        "settings",
        "measured GiB",
        "plan GiB",
        "plan vs measured",
    ]
    worst = max(abs(row["error"]) for row in r["rows"])
    run_line = (
        f"`python benchmarks/memory_plan.py`: {len(rows)} runs of 3 steps (the 2k-8k rows 2), fp32, the peak RSS of rank 0 (model "
        f"loading included) beside `ftune plan` of the same recipe, config and overrides; largest error "
        f"{worst:.1%} (tests/benchmarks/test_memory_plan.py holds every row within 15%). {r['note']}"
    )
    return "\n\n".join((table(header, rows, "llrrlrrr"), run_line, provenance("memory_plan")))


def heap_retention() -> str:
    """What glibc's heap keeps per layer beside the saved activations, at each length (heap_retention.json)."""
    r = load("heap_retention")
    rows = [
        [
            row["method"],
            row["tokens"],
            f"{row['saved_mib_per_layer']:.1f}",
            f"{row['mapped_mib_per_layer']:.1f}",
            f"{row['heap_free_mib_per_layer']:.1f}",
            f"{row['kept_share_of_saved']:.2f}",
            f"{row['kept_share_of_heap_served']:.2f}",
        ]
        for row in r["rows"]
    ]
    header = [
        "method",
        "tokens",
        "saved MiB a layer",
        "of it mapped",
        "heap kept free MiB a layer",
        "kept / saved",
        "kept / heap-served saved",
    ]
    run_line = (
        "`python benchmarks/heap_retention.py`: one packed row, SmolLM2-135M's layer sizes, fp32, a forward "
        f"with autograd on, glibc's `mallinfo2` after each layer. {r['note']}"
    )
    return "\n\n".join((table(header, rows, "lrrrrrr"), run_line, provenance("heap_retention")))
