"""Atomic file writes and step folders that are either complete or ignored.

A file is written under a temporary name in its destination folder, flushed to disk
(`fsync`) and renamed over the final name with `os.replace`, which is atomic on POSIX and
Windows when both names are on the same file system (hence the same folder). A reader thus
sees the old file or the new one, never half of one.

A step folder (`output_dir/step_<N>/`) holds several files, so it cannot be renamed into
place file by file; instead it counts as complete only once the marker file `.complete`
exists, and the marker is written last. Resume and pruning only ever trust complete folders.

Retention deletes only what ftune wrote: `output_dir/.ftune_steps.json` records each step folder
ftune began (before it creates or rewrites the folder) and completed, with a random id that the
folder's marker repeats. A `step_<N>` folder the records do not name (a user's notes, a copy from
another output folder) is never deleted and never written into. A marker without an id was written
by an ftune older than the records: such a complete folder counts as ftune's, since only
`mark_complete` writes that marker, and last; an old folder without a marker is left alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

logger = logging.getLogger(__name__)

COMPLETE_MARKER = ".complete"
RECORDS = ".ftune_steps.json"  # in output_dir: the step folders ftune began and completed there
_STEP_DIR = re.compile(r"^step_(\d+)$")


def _fsync_dir(folder: Path) -> None:
    # The rename itself lives in the folder's entry table; fsync the folder so that it
    # survives a power cut. Not supported on every platform (e.g. Windows): skip there.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success move it over `path` atomically.

    The caller writes the whole file to the yielded path. If the body raises, the temporary
    file is removed and `path` is left untouched.

    Args:
        path: final file name.

    Yields:
        The temporary file name (same folder, hidden, unique).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


def save_safetensors(tensors: Mapping[str, torch.Tensor], path: str | os.PathLike) -> None:
    """Write `tensors` to a safetensors file atomically (CPU, contiguous copies as needed).

    Args:
        tensors: name -> plain tensor. Tensor subclasses (quantized weights) are not supported
            by the format; see `ftune.checkpointing.native` for those.
        path: destination file.
    """
    # safetensors refuses non-contiguous tensors and tensors that share storage (e.g. a
    # tied embedding saved twice); `.contiguous()` is free when already contiguous.
    flat = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(flat, tmp, metadata={"format": "pt"})


def torch_save(obj: Any, path: str | os.PathLike) -> None:
    """`torch.save(obj, path)`, atomically.

    Args:
        obj: anything `torch.save` accepts; keep it loadable with `weights_only=True`.
        path: destination file.
    """
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def write_json(obj: Any, path: str | os.PathLike) -> None:
    """Write `obj` as indented JSON, atomically.

    Args:
        obj: JSON-serialisable value.
        path: destination file.
    """
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copy `src` to `dst` atomically.

    Args:
        src: existing file.
        dst: destination file.
    """
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def step_dir(output_dir: str | os.PathLike, step: int) -> Path:
    """The folder of step `step`: `output_dir/step_<step>`."""
    return Path(output_dir) / f"step_{step}"


def step_of(folder: str | os.PathLike) -> int | None:
    """The step number in a `step_<N>` folder name, or None for any other name."""
    match = _STEP_DIR.match(Path(folder).name)
    return int(match.group(1)) if match else None


def is_complete(folder: str | os.PathLike) -> bool:
    """True when `folder` holds the completion marker (every file of the save was written)."""
    return (Path(folder) / COMPLETE_MARKER).is_file()


def mark_complete(folder: str | os.PathLike, info: dict[str, Any] | None = None) -> None:
    """Write the completion marker; call it after every other file of the folder is written.

    Args:
        folder: the step folder.
        info: small JSON-able facts stored in the marker (e.g. step and epoch), for humans.
    """
    write_json({"complete": True, **(info or {})}, Path(folder) / COMPLETE_MARKER)


def _marker(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / COMPLETE_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("complete") is True else None


def _records(output_dir: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((output_dir / RECORDS).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        logger.warning(
            "%s is unreadable (%s): no step folder there counts as ftune's", output_dir / RECORDS, e
        )
        return {}
    steps = data.get("steps") if isinstance(data, dict) else None
    return {k: v for k, v in steps.items() if isinstance(v, dict)} if isinstance(steps, dict) else {}


def _write_records(output_dir: Path, steps: dict[str, dict[str, Any]]) -> None:
    note = "step folders ftune wrote here; retention deletes only these"
    write_json({"written_by": "ftune", "note": note, "steps": steps}, output_dir / RECORDS)


def ftune_state(folder: str | os.PathLike) -> str | None:
    """What the output folder's records say of step folder `folder`: "complete" (ftune wrote it and its
    marker carries the recorded id, or an older ftune's marker without an id), "interrupted" (ftune
    began it and it has no marker), or None (not ftune's: never deleted nor written into)."""
    folder = Path(folder)
    step, marker = step_of(folder), _marker(folder)
    entry = _records(folder.parent).get(str(step)) if step is not None else None
    if entry is not None:
        if marker is None:
            return "interrupted" if not (folder / COMPLETE_MARKER).exists() else None
        return "complete" if marker.get("id") == entry.get("id") else None  # the id proves ftune wrote it
    if marker is not None and "id" not in marker and marker.get("step", step) == step:
        return "complete"  # written by an ftune older than the records
    return None


def begin_step(folder: str | os.PathLike, step: int) -> str:
    """Record that ftune writes step folder `folder` now; call before creating or rewriting it.

    Returns:
        The save's id, for `finish_step`.

    Raises:
        FileExistsError: `folder` exists and is not ftune's (named, with how to fix it).
    """
    folder = Path(folder)
    if folder.exists() and ftune_state(folder) is None:
        raise FileExistsError(foreign_message(folder, f"saving step {step}"))
    save_id = uuid.uuid4().hex
    steps = _records(folder.parent)
    steps[str(step)] = {"id": save_id, "state": "started"}
    _write_records(folder.parent, steps)
    return save_id


def finish_step(
    folder: str | os.PathLike, step: int, save_id: str, info: dict[str, Any] | None = None
) -> None:
    """Write the completion marker (with the save's id), then record the folder as complete."""
    folder = Path(folder)
    mark_complete(folder, {**(info or {}), "id": save_id})
    steps = _records(folder.parent)
    steps[str(step)] = {"id": save_id, "state": "complete"}
    _write_records(folder.parent, steps)


def foreign_message(folder: Path, doing: str) -> str:
    """Why ftune does not write into `folder`, a step folder it did not write, and how to fix it."""
    return (
        f"{doing} would write into {str(folder)!r}, a folder ftune did not write: {folder.parent / RECORDS} "
        f"does not record it and it has no {COMPLETE_MARKER} marker of ftune's. ftune never writes into, "
        "overwrites or deletes a folder it did not write. Move that folder out of the output folder (or "
        "delete it if it is an interrupted save of an older ftune), or give this run another output_dir."
    )


def remove_step(folder: Path) -> None:
    """Delete an ftune step folder and its record (marker first: a crash mid-way leaves an ignored folder)."""
    logger.info("Removing old checkpoint folder %s", folder)
    mark_incomplete(folder)
    shutil.rmtree(folder)
    steps = _records(folder.parent)
    if steps.pop(str(step_of(folder)), None) is not None:
        _write_records(folder.parent, steps)


def mark_incomplete(folder: str | os.PathLike) -> None:
    """Remove the completion marker (before overwriting a folder that was complete)."""
    marker = Path(folder) / COMPLETE_MARKER
    if marker.exists():
        marker.unlink()
        _fsync_dir(marker.parent)


def _step_dirs(output_dir: Path) -> list[tuple[int, Path]]:
    if not output_dir.is_dir():
        return []
    found = [(step_of(p), p) for p in output_dir.iterdir() if p.is_dir()]
    return sorted((s, p) for s, p in found if s is not None)


def find_latest_complete(output_dir: str | os.PathLike) -> Path | None:
    """The complete step folder with the highest step in `output_dir`.

    Args:
        output_dir: the run's output folder (may not exist yet).

    Returns:
        `output_dir/step_<N>` with the largest N whose marker exists, or None if there is none.
    """
    complete = [p for _, p in _step_dirs(Path(output_dir)) if is_complete(p)]
    return complete[-1] if complete else None


def prune(output_dir: str | os.PathLike, keep_last_n: int) -> list[Path]:
    """Delete all but the newest `keep_last_n` complete step folders ftune wrote, and its stale interrupted ones.

    Only folders `ftune_state` calls ftune's are counted or deleted. An interrupted one is stale when
    a complete one with a higher step exists; newer ones are left alone (a save may be under way).

    Args:
        output_dir: the run's output folder.
        keep_last_n: how many complete step folders to keep, at least 1.

    Returns:
        The folders removed.

    Raises:
        ValueError: if `keep_last_n` < 1.
    """
    if keep_last_n < 1:
        raise ValueError(
            f"keep_last_n_checkpoints must be a positive int or None (keep all), got {keep_last_n}."
        )
    folders = [(s, p, ftune_state(p)) for s, p in _step_dirs(Path(output_dir))]
    complete = [(s, p) for s, p, state in folders if state == "complete"]
    if not complete:
        return []
    newest = complete[-1][0]
    doomed = [p for _, p in complete[:-keep_last_n]]
    doomed += [p for s, p, state in folders if state == "interrupted" and s < newest]
    for folder in doomed:
        remove_step(folder)
    return doomed
