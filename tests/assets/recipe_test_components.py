"""Components that recipe tests plug into configs (importable: tests/assets is on sys.path)."""

from __future__ import annotations

from ftune.data.collate import padded_collate_sft

CALLS = {"collate": 0}


def counting_collate(batch, *, pad_id: int, pad_to_multiple_of: int = 16):
    """Right padding to a multiple of 16, counting its calls: proves the recipe used the config's collate."""
    CALLS["collate"] += 1
    return padded_collate_sft(batch, pad_id=pad_id, pad_to_multiple_of=pad_to_multiple_of)


def char_code_reward(prompt: str, completion: str, sample) -> float:
    """A GRPO test reward that differs between a tiny random model's completions (exact match is 0 for
    all of them, which gives no advantage): the completion's character codes summed, mod 7, over 6."""
    return sum(map(ord, completion)) % 7 / 6.0
