"""Components that recipe tests plug into configs (importable: tests/assets is on sys.path)."""

from __future__ import annotations

from ftune.data.collate import padded_collate_sft

CALLS = {"collate": 0}


def counting_collate(batch, *, pad_id: int, pad_to_multiple_of: int = 16):
    """Right padding to a multiple of 16, counting its calls: proves the recipe used the config's collate."""
    CALLS["collate"] += 1
    return padded_collate_sft(batch, pad_id=pad_id, pad_to_multiple_of=pad_to_multiple_of)
