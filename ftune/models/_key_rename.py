"""Key renaming by pattern, shared by the HF and Meta converters.

A pattern is a key with its layer index replaced by `{}`: `model.layers.{}.self_attn.q_proj.weight`.
Renaming looks the pattern up in a table and puts the index back; a key whose pattern is neither
in the table nor in the explicit ignore set raises, so nothing is ever dropped silently.
"""

import re

import torch

StateDict = dict[str, torch.Tensor]

_LAYER_INDEX = re.compile(r"(?:^|(?<=\.))layers\.(\d+)\.")


def key_pattern(key: str) -> tuple[str, str | None]:
    """Split `key` into its pattern and its layer index (None for keys outside the layers)."""
    match = _LAYER_INDEX.search(key)
    if match is None:
        return key, None
    return key[: match.start(1)] + "{}" + key[match.end(1) :], match.group(1)


def rename_key(
    key: str, table: dict[str, str], ignored: frozenset[str], *, family: str, source: str
) -> str | None:
    """Map one key through `table`; None if its pattern is in `ignored`.

    Args:
        key: the key to rename.
        table: pattern -> pattern.
        ignored: patterns that are skipped on purpose (e.g. HF's `rotary_emb.inv_freq`).
        family: model family, for the error message.
        source: name of the input format ("HF", "Meta", "ftune"), for the error message.

    Raises:
        KeyError: if the key's pattern is unknown.
    """
    pattern, index = key_pattern(key)
    if pattern in ignored:
        return None
    target = table.get(pattern)
    if target is None:
        known = ", ".join(sorted(table))
        raise KeyError(
            f"{family}: unknown key {key!r} (pattern {pattern!r}) in a {source} state dict. "
            f"Known {source} patterns for {family}: {known}. Check that the checkpoint is a {family} "
            f"model; adapter (lora_*) keys must be split off before converting the base weights."
        )
    return target.replace("{}", index) if index is not None else target


def invert(table: dict[str, str]) -> dict[str, str]:
    """Reverse a one-to-one pattern table."""
    inverse = {v: k for k, v in table.items()}
    assert len(inverse) == len(table), "pattern table is not one-to-one"
    return inverse
