"""Reading weight files with errors that name the file: safetensors, torch `.bin`/`.pth`, JSON.

Every reader maps the many ways a file can be broken (truncated download, disk full during a
copy, a stray text file with the right name) to one `ValueError` whose single line names the
file and says how to fix it, instead of a deep traceback from the deserialiser.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from ftune.config.model_source import missing_folder_message

StateDict = dict[str, torch.Tensor]

_FIX = "The file is truncated or corrupt: download or convert the checkpoint again."


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def require_dir(
    folder: str | os.PathLike, *, what: str = "checkpoint folder", fix: str | None = None
) -> Path:
    """Return `folder` as a Path, or raise if it is not an existing directory.

    Args:
        folder: the folder to check.
        what: how the message names it ("checkpoint folder", "resume_from_checkpoint folder", ...).
        fix: how to fix it; default: how to download or convert a checkpoint into `folder`.

    Raises:
        FileNotFoundError: naming the folder and how to fix it.
    """
    path = Path(folder).expanduser()
    if not path.is_dir():
        if fix is None:  # the message `ftune run` gives before torch is imported (ftune.config.model_source)
            raise FileNotFoundError(missing_folder_message(path, what=what))
        raise FileNotFoundError(f"{what} {str(path)!r} does not exist or is not a folder. {fix}")
    return path


def require_file(path: Path, *, listed_in: Path | None = None) -> Path:
    """Return `path`, or raise naming it (and the index that listed it) if it does not exist.

    Raises:
        FileNotFoundError: the file is missing.
    """
    if not path.is_file():
        where = f", listed in {listed_in.name}" if listed_in is not None else ""
        raise FileNotFoundError(
            f"checkpoint file {str(path)!r} is missing{where}. The checkpoint folder is incomplete: "
            "download or convert it again."
        )
    return path


def read_json(path: Path) -> dict[str, Any]:
    """Load a JSON object from `path`.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: `path` is not valid JSON (one line naming the file).
    """
    require_file(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot parse {str(path)!r} as JSON ({_first_line(e)}). {_FIX}") from None


def read_safetensors(path: Path) -> StateDict:
    """Load every tensor of a safetensors file; the file is memory-mapped, not read whole.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is truncated or corrupt (one line naming the file).
    """
    require_file(path)
    try:
        with safe_open(path, framework="pt", device="cpu") as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:
        raise ValueError(f"cannot read checkpoint file {str(path)!r} ({_first_line(e)}). {_FIX}") from None


def read_torch(path: Path) -> Any:
    """`torch.load(path, weights_only=True, mmap=True)` with an error that names the file.

    `weights_only=True` refuses to run code from the file (pickle), and `mmap=True` maps the
    tensors from disk instead of copying them into memory.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is truncated or corrupt (one line naming the file).
    """
    require_file(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError as e:
        # mmap needs the zip (new) serialisation format; old-format files load without it.
        if "mmap" in str(e):
            return _read_torch_no_mmap(path)
        raise ValueError(f"cannot read checkpoint file {str(path)!r} ({_first_line(e)}). {_FIX}") from None
    except Exception as e:
        if "weights_only" in str(e) or "Unsupported global" in str(e):
            raise ValueError(
                f"{str(path)!r} holds Python objects that torch.load(weights_only=True) refuses "
                f"({_first_line(e)}). ftune loads only tensors and plain containers; re-save the file "
                "with tensors, lists, dicts and numbers only."
            ) from None
        raise ValueError(f"cannot read checkpoint file {str(path)!r} ({_first_line(e)}). {_FIX}") from None


def _read_torch_no_mmap(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"cannot read checkpoint file {str(path)!r} ({_first_line(e)}). {_FIX}") from None


def read_weights(path: Path) -> StateDict:
    """Load a weight file by extension: `.safetensors`, or a torch pickle (`.bin`, `.pth`, `.pt`).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is corrupt, or holds something other than a name -> tensor dict.
    """
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    sd = read_torch(path)
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ValueError(
            f"{str(path)!r} does not hold a state dict (a dict of name -> tensor); got {type(sd).__name__}."
        )
    return sd
