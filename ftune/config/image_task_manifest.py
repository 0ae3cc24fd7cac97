"""What an image task folder was written for: ``image_task.json`` beside its train.jsonl, checked without torch.

`ftune.datasets.write_image_task` writes the synthetic image task into a folder, and the image task
datasets write it there on first use and read it from there afterwards. The files depend on four
arguments (`ARGS`): the split sizes, the seed and the image size. The writer records them in
``image_task.json``; a dataset given other values refuses the folder (`check_manifest`), since
reusing it would train or evaluate on another task than the config asks for. `ftune run` and
`ftune validate` make the same check before the model loads (ftune.cli.fast_check).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MANIFEST = "image_task.json"
# The arguments the files depend on, with the image task datasets' defaults.
ARGS = {"n_train": 2000, "n_heldout": 200, "seed": 0, "size": 64}
# The dataset components that write the task into their data_dir (ftune.datasets.image_task).
BUILDERS = tuple(
    f"ftune.datasets.{module}{name}"
    for name in ("image_task_dataset", "image_task_preference_dataset", "image_task_prompt_dataset")
    for module in ("", "image_task.")
)


def manifest_of(args: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's content for these arguments (`ARGS`' keys, in order)."""
    return {key: args[key] for key in ARGS}


def write_manifest(data_dir: str | Path, args: Mapping[str, Any]) -> Path:
    """Record `args` in ``<data_dir>/image_task.json`` (whole or not at all); its path."""
    path = Path(data_dir) / MANIFEST
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest_of(args)) + "\n")
    tmp.replace(path)
    return path


def read_manifest(data_dir: str | Path) -> dict[str, Any] | None:
    """The arguments recorded in `data_dir`, or None when it has no ``image_task.json``.

    Raises:
        ValueError: the file is not a JSON object of `ARGS`' keys.
    """
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        return None
    try:
        recorded = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        recorded = e
    if not isinstance(recorded, dict) or set(recorded) != set(ARGS):
        raise ValueError(
            f"image task: '{path}' is not an image task record (a JSON object of {', '.join(ARGS)}); "
            f"it holds {str(recorded)[:80]!r}. Delete the folder '{path.parent}' so the task is written anew."
        )
    return recorded


def differences(given: Mapping[str, Any], recorded: Mapping[str, Any], where: str) -> list[str]:
    """``<where>.<key>=<given> (recorded <value>)`` for each argument that differs."""
    return [
        f"{where}.{key}={given[key]} (recorded {recorded[key]})"
        for key in ARGS
        if given[key] != recorded[key]
    ]


def mismatch_error(data_dir: str | Path, given: Mapping[str, Any], found: str, where: str) -> ValueError:
    """The error of a folder whose files were written for other arguments than `given`.

    Args:
        data_dir: the folder.
        given: the arguments asked for (`ARGS`' keys).
        found: what the folder holds instead, and each differing key with what was given.
        where: the config section or function the arguments come from (``dataset``).
    """
    same = ", ".join(f"{where}.{key}={value}" for key, value in manifest_of(given).items())
    return ValueError(
        f"image task: data_dir '{data_dir}' holds files written for other arguments than {where} asks "
        f"for: {found}. Reusing them would train or evaluate on another task than configured. "
        f"Delete the folder (the task is written anew on first use) or pass the arguments it was "
        f"written with; {where} asks for {same}."
    )


def check_manifest(data_dir: str | Path, given: Mapping[str, Any], where: str) -> bool:
    """Check that `data_dir`'s recorded arguments equal `given`.

    Returns:
        True when the folder has a manifest and it matches; False when it has none.

    Raises:
        ValueError: the recorded arguments differ (each key named with both values), or the
            manifest is unreadable.
    """
    recorded = read_manifest(data_dir)
    if recorded is None:
        return False
    if differ := differences(given, recorded, where):
        found = f"{', '.join(differ)} in its {MANIFEST}"
        raise mismatch_error(data_dir, given, found, where)
    return True
