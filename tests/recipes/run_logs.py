"""Reading a recipe run's outputs in the feature checks: its JSONL log rows, losses, saved weights."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file


def read_log(output_dir: Path) -> list[dict]:
    """The DiskLogger's JSONL rows of a run (every file in output_dir/logs, in name order)."""
    rows = []
    for file in sorted((output_dir / "logs").glob("*.jsonl")):
        rows += [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return rows


def losses(logs):
    return [row["loss"] for row in logs if "loss" in row]


def _column(logs, key):
    return [row[key] for row in logs if "loss" in row]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    name = (
        "adapter_model.safetensors"
        if (folder / "adapter_model.safetensors").exists()
        else "model.safetensors"
    )
    return load_file(str(folder / name))


def _assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], rtol: float) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=rtol, atol=1e-7, msg=lambda m, k=k: f"{k}: {m}")
