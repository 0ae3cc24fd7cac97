"""ftune's native format: ftune tensor names, no conversion, and the one format for quantized models.

A native folder holds the weights and `ftune_meta.json` ({"format": "ftune", "version",
"family", "weights"}), plus `config.json` and tokenizer files when the base folder had them.
Plain tensors go to `model.safetensors`. Quantized state dicts (torchao tensor subclasses, which
safetensors cannot store) go to `model.pt` in the quantized file format (`ftune.checkpointing.quantized`:
`save_quantized` / `read_quantized`), loaded with `torch.load(weights_only=True)`; so the quantize
recipe's output and this checkpointer read the same files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

import ftune.checkpointing.atomic as atomic
from ftune.checkpointing._checkpointer import Checkpointer
from ftune.checkpointing.families import check_family
from ftune.checkpointing.loaded import StateDict
from ftune.checkpointing.model_build import HF_CONFIG_FILE, read_hf_config
from ftune.checkpointing.quantized import read_quantized, save_quantized
from ftune.checkpointing.readers import read_json, read_safetensors, require_file

META_FILE = "ftune_meta.json"
SAFETENSORS_FILE = "model.safetensors"
QUANTIZED_FILE = "model.pt"
FORMAT_VERSION = 1


def _is_plain(t: torch.Tensor) -> bool:
    return type(t) in (torch.Tensor, torch.nn.Parameter)


class _StateOnly:
    """Stands in for the model in `save_quantized`, which only calls `state_dict()` on it."""

    def __init__(self, state: StateDict) -> None:
        self._state = state

    def state_dict(self) -> StateDict:
        return self._state


def write_native(
    folder: Path,
    state: StateDict,
    family: str,
    *,
    hf_config: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write a native folder: the weights, `config.json` when given, then `ftune_meta.json`, each atomically.

    The metadata file goes last: until it exists the folder is not a native checkpoint.

    Args:
        folder: destination folder (created if missing).
        state: model weights (ftune names); plain tensors go to safetensors, quantized ones to `model.pt`.
        family: recorded in the metadata.
        hf_config: the model's config.json: written beside the weights, and stored in a quantized
            file's metadata so that `load_quantized(path)` can rebuild the model alone.
        metadata: more JSON-serializable facts for a quantized file's metadata (e.g. the quantizer spec).

    Returns:
        The weights file written.

    Raises:
        ValueError: a quantized tensor type that would not load with weights_only=True, or metadata
            that is not JSON-serializable.
    """
    folder.mkdir(parents=True, exist_ok=True)
    if all(_is_plain(t) for t in state.values()):
        weights = SAFETENSORS_FILE
        atomic.save_safetensors(state, folder / weights)
    else:
        weights = QUANTIZED_FILE
        facts = {
            "family": family,
            **({"hf_config": hf_config} if hf_config is not None else {}),
            **(metadata or {}),
        }
        with atomic.atomic_path(folder / weights) as tmp:
            save_quantized(_StateOnly({k: v.detach() for k, v in state.items()}), tmp, facts)
    if hf_config is not None:
        atomic.write_json(hf_config, folder / HF_CONFIG_FILE)
    meta = {"format": "ftune", "version": FORMAT_VERSION, "family": family, "weights": weights}
    atomic.write_json(meta, folder / META_FILE)
    return folder / weights


def read_native_meta(folder: Path) -> dict:
    """Read and check `ftune_meta.json`.

    Raises:
        FileNotFoundError: the folder is not a native checkpoint (no metadata).
        ValueError: the metadata is not ftune's, or from a newer version.
    """
    path = folder / META_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{str(path)!r} is missing: {str(folder)!r} is not an ftune native checkpoint. For a Hugging Face "
            "folder (config.json + *.safetensors) use HFCheckpointer, for Meta consolidated.00.pth MetaCheckpointer."
        )
    meta = read_json(path)
    if meta.get("format") != "ftune" or not isinstance(meta.get("version"), int):
        raise ValueError(f"{str(path)!r} is not ftune metadata (expected format 'ftune' and an int version).")
    if meta["version"] > FORMAT_VERSION:
        raise ValueError(
            f"{str(path)!r} has format version {meta['version']}, newer than this ftune reads "
            f"({FORMAT_VERSION}): upgrade ftune."
        )
    return meta


def read_native(folder: Path) -> StateDict:
    """Read the weights of a native folder, in ftune names.

    Raises:
        FileNotFoundError / ValueError: missing or corrupt files, named.
    """
    meta = read_native_meta(folder)
    path = require_file(folder / meta.get("weights", SAFETENSORS_FILE), listed_in=folder / META_FILE)
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    try:
        return read_quantized(path)[1]
    except (RuntimeError, EOFError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"cannot read checkpoint file {str(path)!r} ({type(e).__name__}: {first}). The file is truncated or "
            "corrupt: save or quantize the model again."
        ) from None


class NativeCheckpointer(Checkpointer):
    """Checkpointer for ftune native folders (ftune names, quantized weights allowed).

    `checkpoint_dir` must be a native folder (e.g. the output of the quantize recipe). On save,
    `config.json` is copied along when the base folder has one. See `Checkpointer` for the rest.
    """

    def _detect_family(self, folder: Path) -> str:
        return check_family(read_native_meta(folder)["family"])

    def _read_model(self, folder: Path, family: str) -> StateDict:
        return read_native(folder)

    def _write_model(self, folder: Path, state: StateDict, family: str) -> None:
        write_native(folder, state, family, hf_config=read_hf_config(self.checkpoint_dir))
