"""Seed every random number generator a run touches, and save / restore their states for exact resume."""

import logging
import random
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

_MAX_SEED = 2**32 - 1  # numpy's limit; torch and python accept more
_REQUIRED_KEYS = ("torch", "python", "numpy")


def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy and torch (CPU and every CUDA device).

    Args:
        seed: an int in ``[0, 2**32 - 1]``.

    Raises:
        ValueError: if ``seed`` is not an int in that range.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"seed must be an int in [0, {_MAX_SEED}], got {seed!r}. Set e.g. seed=42.")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA (and MPS) generator


def get_rng_state() -> dict[str, Any]:
    """Capture the state of every generator :func:`seed_everything` seeds.

    The result holds only tensors, ints, floats, tuples and dicts, so it survives
    ``torch.save`` / ``torch.load(weights_only=True)``.

    Returns:
        ``{"torch": ByteTensor, "python": tuple, "numpy": dict}``, plus ``"cuda"`` (the current
        CUDA device's generator) when CUDA is available and ``"mps"`` when MPS is.
    """
    kind, key, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        # numpy's key is an ndarray, which weights_only loading rejects: store it as a tensor.
        "numpy": {
            "kind": kind,
            "key": torch.from_numpy(key.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
    }
    if torch.cuda.is_available():
        # Only the current device: get_rng_state_all() would create a CUDA context on every GPU
        # in every process of a distributed run.
        state["cuda"] = torch.cuda.get_rng_state()
    if torch.backends.mps.is_available():
        state["mps"] = torch.mps.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore generator states captured by :func:`get_rng_state`.

    Args:
        state: the dict :func:`get_rng_state` returned (possibly after a save/load round trip).

    Raises:
        KeyError: if the ``torch``, ``python`` or ``numpy`` entry is missing.
    """
    missing = [k for k in _REQUIRED_KEYS if k not in state]
    if missing:
        raise KeyError(
            f"RNG state is missing {missing}; it has {sorted(state)}. "
            "Pass the dict returned by ftune.runtime.get_rng_state()."
        )
    torch.set_rng_state(state["torch"])
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))  # lists come back from some serialisers
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["kind"],
            np_state["key"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["gauss"],
        )
    )
    if "cuda" in state:
        if torch.cuda.is_available():
            torch.cuda.set_rng_state(state["cuda"])
        else:
            logger.warning("The RNG state holds a CUDA generator but CUDA is not available; skipping them.")
    if "mps" in state:
        if torch.backends.mps.is_available():
            torch.mps.set_rng_state(state["mps"])
        else:
            logger.warning("The RNG state holds an MPS generator but MPS is not available; skipping it.")
