"""Outputs never land on inputs: the one rule every command and recipe that writes checks first.

- An output file that exists is replaced only with `--force`, and never when it is an input.
- An output folder equal to or inside an input folder (a model's checkpoint_dir, a teacher's or
  reference model's folder, the step folder resumed from) is refused. The reverse is fine: an
  input inside the output folder (continuing from `output_dir/step_50`) is a normal use.
- Step-folder retention (`keep_last_n_checkpoints`) prunes only the run's own folders, in the
  order of the run's own steps, never a folder that holds an input, and only folders the output
  folder's records say ftune wrote (`atomic.ftune_state`): a user's `step_0/` of notes survives.

    check_output_dir("out/step_50/more", {"checkpointer.checkpoint_dir": "out/step_50"})  # refused
    check_output_file(Path("new.yaml"), option="-o", force=False, inputs={"the input config": "old.yaml"})
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import ftune.checkpointing.atomic as atomic
from ftune.config.output_path import (  # torch-free: `ftune export` checks first
    OutputOnInputError,
    check_output_dir,
)

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike


def _real(path: PathLike) -> Path:
    return Path(path).expanduser().resolve()  # symlinks and `..` cannot hide an overlap


def _inside_or_equal(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def overlaps(a: PathLike, b: PathLike) -> bool:
    """True when `a` and `b` are the same path or one lies inside the other."""
    ra, rb = _real(a), _real(b)
    return _inside_or_equal(ra, rb) or _inside_or_equal(rb, ra)


def check_step_folder(folder: PathLike, step: int, checkpoint_dir: PathLike) -> None:
    """Refuse to save step `step` into `folder` when it is, holds or lies inside `checkpoint_dir`
    (a run started from `output_dir/step_50` reaching step 50).

    Raises:
        OutputOnInputError: naming both folders, and how to fix it.
    """
    check_output_dir(
        folder,
        {"checkpoint_dir": checkpoint_dir},
        key=f"the folder of step {step}",
        replaced=True,
        fix=f"Give this run an output_dir of its own (step folders are output_dir/step_<N>), or stop it "
        f"before step {step} (max_steps).",
    )


def check_output_file(
    path: PathLike, *, option: str, force: bool, inputs: Mapping[str, PathLike] | None = None
) -> None:
    """Refuse to write the file `path` over an input (even with --force), a folder, or, without --force,
    an existing file; call it before writing anything.

    Args:
        path: the file about to be written.
        option: the option that gave it (e.g. "-o/--output"), named in the message.
        force: the user passed --force.
        inputs: what each input file is (e.g. "the input config") -> its path.

    Raises:
        OutputOnInputError: the file is an input, or a folder.
        FileExistsError: the file exists and `force` is False.
    """
    out = _real(path)
    for name, src in (inputs or {}).items():
        if out == _real(src):
            raise OutputOnInputError(
                f"{option} {str(path)!r} is {name}: writing the output there would destroy the input, so "
                "ftune refuses even with --force. Accepted: a file other than the input. Give another "
                f"output file, e.g. {option.split('/')[0]} {out.with_name(out.stem + '_ftune' + out.suffix)}."
            )
    if out.is_dir():
        raise OutputOnInputError(
            f"{option} {str(path)!r} is a folder; a file is expected. Give a file name, e.g. "
            f"{option.split('/')[0]} {Path(path) / 'out.yaml'}."
        )
    if out.exists() and not force:
        raise FileExistsError(
            f"{option} {str(path)!r} already exists; ftune does not overwrite it. Pass --force to replace it, "
            "or give another output file."
        )


def prune_run(
    output_dir: PathLike,
    keep_last_n: int,
    *,
    written: Iterable[int],
    start_step: int,
    inputs: Iterable[PathLike],
) -> list[Path]:
    """Keep the newest `keep_last_n` complete step folders of this run; remove its older and stale ones.

    The run's folders are those it wrote (`written`) and, when it resumed at `start_step`, the
    earlier ones (`step_<N>` with N <= start_step: the run's history). A folder with a higher step
    that this run did not write belongs to another run and is neither counted nor removed, nor is
    any folder that is, holds or lies inside an input (`inputs`: checkpoint_dir...), nor any folder
    the output folder's records do not call ftune's (`atomic.ftune_state`). Order: the run's steps
    (history first, then what it wrote). An interrupted save of ftune's below the newest step the run
    wrote is stale and removed.

    Args:
        output_dir: the run's output folder.
        keep_last_n: how many complete step folders of this run to keep, at least 1.
        written: the steps this run saved.
        start_step: the step the run resumed at (0 on a fresh run).
        inputs: folders that must survive.

    Returns:
        The folders removed.
    """
    if keep_last_n < 1:
        raise ValueError(
            f"keep_last_n_checkpoints must be a positive int or None (keep all), got {keep_last_n}."
        )
    own = set(written)
    if not own:
        return []
    root = Path(output_dir)
    found = sorted((s, p) for p in root.iterdir() if p.is_dir() and (s := atomic.step_of(p)) is not None)
    protected = list(inputs)
    found = [
        (s, p, atomic.ftune_state(p)) for s, p in found if not any(overlaps(p, src) for src in protected)
    ]
    ours = [(s, p, state) for s, p, state in found if s in own or s <= start_step]
    complete = [p for _, p, state in ours if state == "complete"]
    doomed = complete[:-keep_last_n]
    newest = max(own)
    doomed += [p for s, p, state in found if state == "interrupted" and s < newest]
    for folder in doomed:
        atomic.remove_step(folder)
    return doomed


def refuse_foreign_step_folders(output_dir: PathLike, start_step: int) -> None:
    """Refuse, before a run starts, a `step_<N>` folder above `start_step` that ftune did not write (a user's
    folder, a copy from elsewhere): a save of step N would write into it.

    Raises:
        FileExistsError: naming the first such folder, and how to fix it.
    """
    root = Path(output_dir)
    if not root.is_dir():
        return
    found = sorted((s, p) for p in root.iterdir() if p.is_dir() and (s := atomic.step_of(p)) is not None)
    for step, folder in found:
        if step > start_step and atomic.ftune_state(folder) is None:
            raise FileExistsError(atomic.foreign_message(folder, f"a save of step {step}"))


def warn_foreign_step_folders(output_dir: PathLike, start_step: int, checkpoint_dir: PathLike) -> list[Path]:
    """Say (one warning) when `output_dir` holds complete step folders above `start_step`: another run's.

    Returns:
        Those folders.
    """
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = sorted((s, p) for p in root.iterdir() if p.is_dir() and (s := atomic.step_of(p)) is not None)
    foreign = [p for s, p in found if s > start_step and atomic.is_complete(p)]
    if foreign:
        inputs = [p.name for p in foreign if overlaps(p, checkpoint_dir)]
        held = (
            f" ({', '.join(inputs)} holds checkpoint_dir: never removed, never overwritten)" if inputs else ""
        )
        logger.warning(
            "output_dir %s already holds step folders this run did not write, above the step it starts at "
            "(%d): %s%s. keep_last_n_checkpoints counts and removes only this run's folders; a save of the "
            "same step replaces another run's folder. Give each run its own output_dir to keep them apart.",
            root, start_step, ", ".join(p.name for p in foreign), held,
        )  # fmt: skip
    return foreign


def check_output_folder(
    folder: PathLike,
    names: Iterable[str],
    *,
    option: str,
    force: bool,
    inputs: Mapping[str, PathLike] | None = None,
) -> None:
    """Refuse to write the files `names` into `folder` over an input (even with --force), when
    `folder` is a file, or, without --force, when some of them exist; call it before writing.

    Raises:
        OutputOnInputError: a file to write is an input, or `folder` is a file.
        FileExistsError: some of the files exist and `force` is False (all of them named).
    """
    root = Path(folder)
    if root.exists() and not root.is_dir():
        raise OutputOnInputError(
            f"{option} {str(folder)!r} is a file; a folder is expected. Give a folder (created if missing)."
        )
    for name in names:
        check_output_file(root / name, option=option, force=True, inputs=inputs)
    existing = [name for name in names if (root / name).exists()]
    if existing and not force:
        raise FileExistsError(
            f"{option} {str(folder)!r} already holds {', '.join(existing)}; ftune does not overwrite them. Pass "
            "--force to replace them, or give another folder."
        )
