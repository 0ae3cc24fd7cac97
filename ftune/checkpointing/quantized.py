"""Native quantized checkpoints: one `.pt` file with the quantized state dict and JSON metadata.

The state dict holds torchao tensor subclasses (IntxUnpackedToInt8Tensor, Int8Tensor, ...).
torchao allowlists them for `torch.load(weights_only=True)` when `torchao.quantization` is
imported (it calls `torch.serialization.add_safe_globals` for each class), which
`_register_torchao_tensors` does before every save and load; so loading never unpickles
arbitrary code. torchao is imported there, not at the top: it costs about a second, and every
`ftune validate` and every run imports this package, most of them without a quantized model.
`ftune.quantization` re-exports the three functions.

File layout (a dict, saved with `torch.save`):
    {"format": "ftune.quantized", "version": 1, "metadata": "<json>", "state_dict": {...}}

`metadata` is stored as a JSON string so it loads under weights_only whatever it holds. By
convention it carries what eval/generate need to rebuild the model:
    {"family": "llama3", "hf_config": {...config.json...}, "quantizer": quantizer.spec()}
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ftune.models import model_from_hf_config
from ftune.runtime.torchao_logs import quiet_torchao_import_logs

FORMAT = "ftune.quantized"
VERSION = 1


def _register_torchao_tensors() -> None:
    """Import `torchao.quantization`, which registers its tensor classes as safe globals (once)."""
    quiet_torchao_import_logs()
    import torchao.quantization  # noqa: F401


def save_quantized(model: nn.Module, path: str | Path, metadata: dict[str, Any]) -> Path:
    """Write a quantized model's state dict and metadata to `path`, atomically.

    The file appears complete or not at all: it is written to `<path>.tmp`, flushed to disk,
    then renamed over `path`.

    Args:
        model: the quantized model (after `Quantizer.quantize` or `Quantizer.convert`).
        path: destination file, conventionally `model_quantized.pt`.
        metadata: JSON-serializable dict, conventionally with "family", "hf_config" and
            "quantizer" (a `Quantizer.spec()`); `load_quantized(path)` with no model needs
            "hf_config".

    Returns:
        The path written.

    Raises:
        ValueError: metadata is not a JSON-serializable dict, or a tensor type in the state dict
            could not be loaded back with weights_only=True.
    """
    path = Path(path)
    if not isinstance(metadata, dict):
        raise ValueError(f"save_quantized: metadata must be a dict, got {type(metadata).__name__}.")
    try:
        metadata_json = json.dumps(metadata, sort_keys=True)
    except TypeError as e:
        raise ValueError(
            f"save_quantized: metadata for {path} must be JSON-serializable (str, int, float, bool, "
            f"None, lists and dicts of them): {e}. Convert objects to plain values, e.g. quantizer.spec()."
        ) from e
    state_dict = model.state_dict()
    _register_torchao_tensors()
    allowed = set(torch.serialization.get_safe_globals())
    for key, tensor in state_dict.items():
        if type(tensor) is not torch.Tensor and type(tensor) not in allowed:
            raise ValueError(
                f"save_quantized: {key} is a {type(tensor).__name__}, which torch.load(weights_only=True) "
                "would refuse; only torch.Tensor and torchao's registered quantized tensor classes "
                "can be saved. Quantize with ftune.quantization quantizers."
            )
    payload = {"format": FORMAT, "version": VERSION, "metadata": metadata_json, "state_dict": state_dict}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_quantized(path: str | Path, *, device: str | torch.device = "cpu") -> tuple[dict[str, Any], dict]:
    """Read a quantized checkpoint without building a model.

    Returns:
        (metadata, state_dict).

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: the file is not an ftune quantized checkpoint, or its version is newer.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"load_quantized: no quantized checkpoint at {path}.")
    _register_torchao_tensors()
    payload = torch.load(path, map_location=device, weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(
            f"load_quantized: {path} is not an ftune quantized checkpoint (no format={FORMAT!r} entry); "
            "write one with ftune.quantization.save_quantized."
        )
    if payload.get("version", 0) > VERSION:
        raise ValueError(
            f"load_quantized: {path} has format version {payload['version']}, this ftune reads up to "
            f"{VERSION}; upgrade ftune."
        )
    return json.loads(payload["metadata"]), payload["state_dict"]


def load_quantized(
    path: str | Path,
    model: nn.Module | Callable[[], nn.Module] | None = None,
    *,
    device: str | torch.device = "cpu",
) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild a quantized model from `save_quantized`'s file.

    The model is built in float (from `model`, or from the metadata's "hf_config" through
    `ftune.models.model_from_hf_config`), then every tensor is replaced by the stored one
    (`load_state_dict(assign=True)`), so the linear weights become the saved torchao tensors
    without quantizing anything again. Parameters are frozen: a loaded quantized model is for
    inference.

    Args:
        path: the checkpoint file.
        model: a float model of the same architecture, a zero-argument builder of one, or None
            to build it from the metadata's "hf_config".
        device: where the tensors are loaded.

    Returns:
        (model, metadata).

    Raises:
        ValueError: bad file (see `read_quantized`), no "hf_config" when `model` is None, or the
            state dict does not match the model's keys.
    """
    metadata, state_dict = read_quantized(path, device=device)
    if model is None:
        if "hf_config" not in metadata:
            raise ValueError(
                f"load_quantized: {path} has no 'hf_config' in its metadata (keys: {sorted(metadata)}), so "
                "the model cannot be rebuilt from it; pass the model (or a builder) as the second argument."
            )
        _, model = model_from_hf_config(metadata["hf_config"], device=device)
    elif not isinstance(model, nn.Module):
        model = model()
    model.requires_grad_(False)
    expected, stored = set(model.state_dict()), set(state_dict)
    if expected != stored:
        missing, unexpected = sorted(expected - stored), sorted(stored - expected)
        raise ValueError(
            f"load_quantized: {path} does not match {type(model).__name__}: missing keys {missing[:5]}, "
            f"unexpected keys {unexpected[:5]}. Build the model with the architecture it was saved from "
            "(metadata 'family' / 'hf_config')."
        )
    model.load_state_dict(state_dict, strict=True, assign=True)
    return model.eval(), metadata
