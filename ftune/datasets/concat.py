"""Mix several datasets into one, end to end (shuffling is the loader's job)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import torch


class ConcatDataset(torch.utils.data.Dataset):
    """The items of several map-style datasets, one after another.

    All parts must yield the same kind of item: all unpacked, or all packed to one length
    (a batch cannot mix them). A recipe builds each part with the tokenizer and passes the list:
    `ConcatDataset([instantiate(c, tokenizer) for c in cfg.dataset])`.

    Args:
        datasets: the parts, in order; none may be empty.

    Raises:
        ValueError: no parts, an empty part, or parts whose items differ in kind or pack length.
    """

    def __init__(self, datasets: Sequence[Any]) -> None:
        if not datasets:
            raise ValueError("ConcatDataset: got no datasets; pass a non-empty list of datasets.")
        kinds = []
        for i, ds in enumerate(datasets):
            if len(ds) == 0:
                raise ValueError(f"ConcatDataset: dataset {i} ({type(ds).__name__}) is empty.")
            first = ds[0]
            packed = "document_ids" in first
            kinds.append((tuple(sorted(first)), len(first["tokens"]) if packed else None))
        if len(set(kinds)) > 1:
            described = [
                f"{i}: keys {list(k)}" + (f", pack length {n}" if n else "") for i, (k, n) in enumerate(kinds)
            ]
            raise ValueError(
                "ConcatDataset: the datasets yield different kinds of items, which cannot share a batch: "
                f"{'; '.join(described)}. Use packed=True on all of them with one max_seq_len, or on none."
            )
        self.datasets = list(datasets)
        self.cumulative_sizes = list(accumulate(len(ds) for ds in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"ConcatDataset index {index} out of range for {len(self)} items.")
        part = bisect.bisect_right(self.cumulative_sizes, index)
        offset = self.cumulative_sizes[part - 1] if part else 0
        return self.datasets[part][index - offset]


def concat_datasets(tokenizer: Any, *, datasets: Sequence[Any]) -> ConcatDataset:
    """Mix datasets from a config: build each part with the recipe's tokenizer, then concatenate.

    A dataset builder needs the tokenizer, which only the recipe has, so each part is given as a
    partial component (``_partial_: true``) and called here::

        dataset:
          _component_: ftune.datasets.concat_datasets
          datasets:
            - _component_: ftune.datasets.alpaca_dataset
              _partial_: true
            - _component_: ftune.datasets.chat_dataset
              _partial_: true
              source: data/chats.jsonl
              conversation_style: openai

    Args:
        tokenizer: the recipe's tokenizer, passed to every part.
        datasets: the parts, each a callable taking the tokenizer (what ``_partial_: true``
            builds) or an already built dataset.

    Returns:
        A :class:`ConcatDataset` of the parts, in order.

    Raises:
        ValueError: a part is neither (e.g. ``_partial_: true`` was left out, so the config system
            tried to build it without a tokenizer), or as :class:`ConcatDataset`.
    """
    parts = []
    for i, part in enumerate(datasets):
        if isinstance(part, torch.utils.data.Dataset):
            parts.append(part)
        elif callable(part):
            parts.append(part(tokenizer))
        else:
            raise ValueError(
                f"concat_datasets: datasets[{i}] is a {type(part).__name__} ({part!r}), not a dataset "
                "builder. Give each part as a component with `_partial_: true`, so that it is called "
                "with the tokenizer."
            )
    return ConcatDataset(parts)
