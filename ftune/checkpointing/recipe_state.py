"""`recipe_state.pt`: the training progress saved next to the weights, loadable with `weights_only=True`.

The caller decides the contents (step, epoch, optimizer, lr scheduler, RNG, dataloader
position). This module writes it atomically, loads it without unpickling code, checks at save
time that it *will* load that way (so a run finds out at step 100, not when resuming a week
later), and converts the usual offenders, NumPy arrays and RNG states, into plain tensors.
"""

from __future__ import annotations

import os
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ftune.checkpointing.atomic import torch_save
from ftune.checkpointing.readers import read_torch
from ftune.runtime.torchao_logs import quiet_torchao_import_logs

RECIPE_STATE_FILE = "recipe_state.pt"

# What torch.load(weights_only=True) rebuilds without an allow-list: tensors, plain Python
# values and containers of them (see torch/_weights_only_unpickler.py).
_LEAVES = (torch.Tensor, int, float, bool, complex, str, bytes, type(None), torch.dtype, torch.device)
_CONTAINERS = (dict, OrderedDict, list, tuple, set, frozenset)


def to_weights_only_safe(obj: Any) -> Any:
    """Recursively convert NumPy values so `torch.load(weights_only=True)` accepts them.

    NumPy arrays become tensors (`torch.from_numpy`, copied), NumPy scalars become Python
    numbers; containers are rebuilt with the same type (tuples stay tuples). Anything else is
    returned unchanged.

    Args:
        obj: a state value, e.g. a dataloader or sampler `state_dict()`.

    Returns:
        The converted value.
    """
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return type(obj)((k, to_weights_only_safe(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(to_weights_only_safe(v) for v in obj)
    return obj


def check_weights_only_safe(obj: Any, where: str = "recipe_state") -> None:
    """Raise if `obj` holds a value that `torch.load(weights_only=True)` would refuse.

    Args:
        obj: the object about to be saved.
        where: its name, used as the root of the path in the message.

    Raises:
        TypeError: naming the path of the first offending value and its type.
    """
    if isinstance(obj, _LEAVES) and not hasattr(obj, "_fields"):
        return
    if isinstance(obj, _CONTAINERS) and not hasattr(obj, "_fields"):
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for k, v in items:
            if isinstance(obj, dict) and not isinstance(k, _LEAVES):
                raise TypeError(f"{where} has a key of type {type(k).__name__}; use str or int keys.")
            check_weights_only_safe(v, f"{where}[{k!r}]")
        return
    hint = (
        " Convert NumPy values with ftune.checkpointing.to_weights_only_safe(...) and RNG states with "
        "ftune.runtime.get_rng_state()."
        if type(obj).__module__.startswith("numpy")
        else " Store its state_dict() or plain numbers/lists/tensors instead."
    )
    raise TypeError(
        f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}, which "
        f"torch.load(weights_only=True) refuses, so the checkpoint could not be resumed.{hint}"
    )


def save_recipe_state(state: dict[str, Any], folder: str | os.PathLike) -> Path:
    """Check and write `folder/recipe_state.pt` atomically.

    Args:
        state: e.g. {"step": int, "epoch": int, "optimizer": optimizer.state_dict(),
            "lr_scheduler": scheduler.state_dict(), "rng": ftune.runtime.get_rng_state(),
            "dataloader": sampler.state_dict()}.
        folder: the step folder.

    Returns:
        The file written.

    Raises:
        TypeError: if a value would not load with `weights_only=True` (see `check_weights_only_safe`).
    """
    check_weights_only_safe(state)
    path = Path(folder) / RECIPE_STATE_FILE
    torch_save(state, path)
    return path


def _pickle_names_torchao_optim(path: Path) -> bool:
    # torch.save writes a zip whose <name>/data.pkl holds the pickled structure (class names in clear)
    try:
        with zipfile.ZipFile(path) as z:
            pickles = [n for n in z.namelist() if n.endswith("data.pkl")]
            return any(b"torchao.optim" in z.read(n) for n in pickles)
    except zipfile.BadZipFile:
        return False


def read_torch_allowing_torchao_optim(path: Path) -> Any:
    """`read_torch`, and if the file holds torchao's quantized optimizer states, import them and read again.

    torchao's 8-bit, 4-bit and fp8 AdamW keep their moments as tensor subclasses that torchao
    allow-lists for `weights_only=True` loading when `torchao.optim` is imported. A resumed run
    loads `recipe_state.pt` before it builds the optimizer, so that import may not have happened
    yet; it is done here only when the file needs it (importing torchao costs seconds).
    """
    try:
        return read_torch(path)
    except ValueError:
        if not _pickle_names_torchao_optim(path):
            raise
    quiet_torchao_import_logs()
    import torchao.optim  # noqa: F401  (registers OptimState8bit/4bit/Fp8 as safe globals)

    return read_torch(path)


def load_recipe_state(folder: str | os.PathLike) -> dict[str, Any] | None:
    """Load `folder/recipe_state.pt` with `weights_only=True`, or None if the folder has none.

    Raises:
        ValueError: the file is corrupt (naming it).
    """
    path = Path(folder) / RECIPE_STATE_FILE
    if not path.exists():
        return None
    state = read_torch_allowing_torchao_optim(path)
    if not isinstance(state, dict):
        raise ValueError(f"{str(path)!r} should hold a dict of recipe state, got {type(state).__name__}.")
    return state
