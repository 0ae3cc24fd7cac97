"""Tiny targets for instantiate/validate tests (importable as `ftune_test_targets`)."""

from __future__ import annotations

from typing import Literal


class Tokenizer:
    def __init__(self, *, vocab: int = 10) -> None:
        self.vocab = vocab


def tiny_model(*, dim: int, layers: int = 1, act: Literal["relu", "gelu"] = "relu", scale: float = 1.0):
    return {"dim": dim, "layers": layers, "act": act, "scale": scale}


def dataset(tokenizer, *, source: str, max_len: int | None = None, transform=None):
    return {"tokenizer": tokenizer, "source": source, "max_len": max_len, "transform": transform}


def transform(*, upper: bool = False):
    return ("transform", upper)


def concat(*, parts: list):
    return parts


def collate(batch, *, pad_id: int):
    return [b + pad_id for b in batch]
