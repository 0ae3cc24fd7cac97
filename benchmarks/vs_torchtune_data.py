"""The data side of benchmarks/vs_torchtune.py, imported by both tools' runs (in two different venvs).

Both recipes get the same pre-tokenised rows from one JSON file that benchmarks/vs_torchtune.py wrote
(a list of token-id lists, every row `seq_len` tokens), so neither tool's tokenizer or packing code
decides what the model sees. benchmarks/vs_torchtune_instruct.py writes "items" instead: samples
of different lengths with their own labels (the prompt masked), which each tool batches its own
default way. This module imports neither ftune nor torchtune.
"""

from __future__ import annotations

import json
from typing import Any


class PretokenizedItems:
    """Samples as {"tokens", "labels"} items of their own lengths, labels as written (-100 = no loss)."""

    def __init__(self, items: list[dict[str, list[int]]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        item = self.items[index]
        return {"tokens": list(item["tokens"]), "labels": list(item["labels"])}


class PretokenizedRows:
    """Rows of token ids as {"tokens", "labels"} items, labels equal to tokens (every token is trained on)."""

    def __init__(self, rows: list[list[int]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return {"tokens": list(self.rows[index]), "labels": list(self.rows[index])}


def pretokenized(tokenizer: Any, *, path: str, packed: bool = False) -> PretokenizedRows | PretokenizedItems:
    """The dataset component of both configs; the recipe's tokenizer (passed positionally) is not used.

    `packed` is the key torchtune's recipes read from the dataset node; the rows are packed already
    (contiguous text, no padding), so the recipes' own packing stays off.
    """
    if packed:
        raise ValueError("dataset.packed: the rows are packed already; set packed: false")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return PretokenizedItems(data["items"]) if "items" in data else PretokenizedRows(data["rows"])


def torchtune_tokenizer(path: str, pad_id: int) -> Any:
    """torchtune's tokenizer for a Hugging Face tokenizer.json, with the pad id its recipes' collate reads."""
    from torchtune.modules.transforms.tokenizers import HuggingFaceBaseTokenizer

    tokenizer = HuggingFaceBaseTokenizer(
        f"{path}/tokenizer.json", tokenizer_config_json_path=f"{path}/tokenizer_config.json"
    )
    tokenizer.pad_id = pad_id
    return tokenizer
