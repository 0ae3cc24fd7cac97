"""Where a command writes one new file: the one rule `ftune cp` and `ftune export` share (torch-free).

`output_file(given, ...)` checks a destination as the user typed it and returns the file to write:

- a trailing `/` names a folder: the file goes into it (`into`), never a file called like the folder;
- a missing parent folder is refused with the `mkdir -p` to run, unless `--make-parents`;
- a path whose parent is a file (`notes.txt/x.py`) is refused, naming the file;
- a symbolic link, dangling or not, is never written through, even with `--force`;
- an existing file is replaced only with `--force`, atomically (`replace_file`: a new file renamed over
  the name, so a hard link or a reader of the old file never sees a half-written one);
- a folder (e.g. `into` names a folder inside the destination) and an input (a command's own source)
  are refused, even with `--force`.

Every refusal is an `OutputPathError` (or `FileExistsError`) with one message: what is wrong, the
option and the path given, and how to fix it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path

PathLike = str | os.PathLike


class OutputOnInputError(ValueError):
    """An output that would overwrite or land inside an input (reported as one message, no traceback)."""


class OutputPathError(ValueError):
    """A destination ftune will not write (reported as one message, no traceback)."""


def _file_in_the_way(path: Path) -> Path | None:
    """The first ancestor of `path` that exists and is not a folder (so nothing can be created below it)."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            return parent
        if not parent.exists():
            return None
    return None


def output_file(
    given: PathLike,
    *,
    option: str,
    force: bool,
    make_parents: bool = False,
    into: str | None = None,
    inputs: Mapping[str, PathLike] | None = None,
) -> Path:
    """Check the destination `given` (as typed: a trailing `/` counts) and return the file to write.

    Args:
        given: the destination the user gave.
        option: where it was given (e.g. "dest", "output"), named in every message.
        force: the user passed --force (replace an existing regular file).
        make_parents: the user passed --make-parents (the writer creates missing folders, after every check).
        into: the file name to use when `given` is a folder (`ftune cp`: the source's name); None: a
            folder is refused.
        inputs: what each input file is (e.g. "the shipped recipe") -> its path; never written, even
            with --force.

    Returns:
        The file to write (its parent folder exists, or `make_parents` is set).

    Raises:
        OutputPathError: a folder, a symbolic link, an input, a file in the path, a missing parent.
        FileExistsError: the file exists and `force` is False.
    """
    text = os.fspath(given)
    path = Path(text).expanduser()
    flag = option
    names_folder = text.endswith(("/", os.sep)) or path.is_dir()
    if names_folder:
        if into is None:
            raise OutputPathError(
                f"{flag} {text!r} is a folder; a file is expected. Give a file name, e.g. {path / 'model.gguf'}."
            )
        if not path.is_dir() and not path.is_symlink() and not path.exists() and not make_parents:
            raise OutputPathError(
                f"{flag} {text!r} ends in '/', so it names a folder, and the folder {path} does not exist; ftune "
                f"does not create folders unasked (nor write a file called {path.name!r}). Create it with "
                f"`mkdir -p {path}` or pass --make-parents, or drop the '/' to write the file {path}."
            )
        path = path / into
    blocker = _file_in_the_way(path)
    if blocker is not None:
        raise OutputPathError(
            f"{flag} {text!r}: {blocker} is a file, not a folder, so nothing can be written below it. Give "
            f"a path whose folders are folders, e.g. {blocker.parent / path.name}."
        )
    if path.is_symlink():
        target = os.readlink(path)
        state = "" if path.exists() else ", which does not exist (a dangling link)"
        raise OutputPathError(
            f"{flag} {str(path)!r} is a symbolic link to {target!r}{state}; ftune never writes through a link, "
            "even with --force (the file it points to may be anyone's). Remove the link (`rm "
            f"{path}`) or give another path."
        )
    if path.is_dir():
        raise OutputPathError(
            f"{flag} {str(path)!r} is a folder; ftune writes a file there only if nothing is in the way. Give "
            f"another destination, e.g. {path.parent / ('my_' + path.name)}."
        )
    for name, src in (inputs or {}).items():
        if path.resolve() == Path(src).expanduser().resolve():
            raise OutputPathError(
                f"{flag} {str(path)!r} is {name}: writing there would destroy the input, so ftune refuses "
                f"even with --force. Give another file, e.g. {path.with_name('my_' + path.name)}."
            )
    if path.exists() and not path.is_file():
        raise OutputPathError(f"{flag} {str(path)!r} exists and is not a regular file. Give another path.")
    if path.exists() and not force:
        raise FileExistsError(
            f"{flag} {str(path)!r} already exists; ftune does not overwrite it. Pass --force to replace it, "
            "or give another destination."
        )
    if not path.parent.is_dir() and not make_parents:
        raise OutputPathError(
            f"{flag} {text!r}: the folder {path.parent} does not exist; ftune does not create folders "
            f"unasked. Create it with `mkdir -p {path.parent}`, or pass --make-parents."
        )
    return path


def replace_file(src: PathLike, dest: PathLike) -> None:
    """Copy `src` to `dest` atomically: a hidden file beside `dest`, renamed over it (never written through)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


# Config keys that name a folder a run reads a model from, and keys that name a folder it writes logs to.
INPUT_KEYS = ("checkpoint_dir", "adapter_dir", "resume_from_checkpoint")
LOG_KEYS = ("log_dir",)


def check_output_dir(
    output: PathLike,
    inputs: Mapping[str, PathLike | None],
    *,
    key: str = "output_dir",
    replaced: bool = False,
    fix: str | None = None,
) -> None:
    """Refuse an output folder equal to or inside one of the input folders; call it before writing.

    Args:
        output: the folder about to be written.
        inputs: where each input folder was set (a config key or option) -> the folder; None
            entries are skipped.
        key: where `output` was set, named in the message.
        replaced: the output folder is replaced as a whole (a step folder): it must not contain
            an input either.
        fix: how to fix it; default: set `key` to another folder.

    Raises:
        OutputOnInputError: naming both keys and paths, and how to fix it.
    """
    out = _real(str(output))
    for name, folder in inputs.items():
        if folder is None:
            continue
        src = _real(str(folder))
        if out == src:
            relation = "is"
        elif src in out.parents:
            relation = "is inside"
        elif replaced and out in src.parents:
            relation = "holds"
        else:
            continue
        raise OutputOnInputError(
            f"{key} {str(output)!r} {relation} {name} {str(folder)!r}: ftune never writes where it reads a "
            f"model, which would mix or overwrite the input's files. Accepted: a folder outside {src} (a folder "
            "that contains it is fine). "
            + (fix or f"Set {key} to another folder, e.g. {key}={src.parent / (src.name + '_out')}.")
        )


def _leaves(node: object, prefix: str = "") -> list[tuple[str, object]]:
    if isinstance(node, dict):
        return [leaf for k, v in node.items() for leaf in _leaves(v, f"{prefix}{k}.")]
    return [(prefix[:-1], node)]


def _real(path: str) -> Path:
    return Path(path).expanduser().resolve()  # symlinks and `..` cannot hide an overlap


def logs_on_inputs(cfg) -> list[str]:
    """Problems (one message each) for a log folder (`metric_logger.log_dir`...) equal to or inside a folder
    the run reads a model from (`checkpointer.checkpoint_dir`...): found from the config alone."""
    leaves = [(k, v) for k, v in _leaves(cfg.to_dict()) if isinstance(v, str) and v.strip()]
    inputs = [(k, v) for k, v in leaves if k.rpartition(".")[2] in INPUT_KEYS and v != "auto"]

    def within(path: Path, folder: Path) -> bool:
        return path == folder or folder in path.parents

    # An output_dir inside an input is refused by its own check, by that key: no second message for its logs.
    outputs = [_real(v) for k, v in leaves if k in ("output_dir", "checkpointer.output_dir")]
    refused = [o for o in outputs if any(within(o, _real(src)) for _, src in inputs)]
    problems = []
    for key, log in leaves:
        if key.rpartition(".")[2] not in LOG_KEYS or any(within(_real(log), o) for o in refused):
            continue
        for name, src in inputs:
            out, folder = _real(log), _real(src)
            if within(out, folder):
                relation = "is" if out == folder else "is inside"
                problems.append(
                    f"{key} {log!r} ({cfg.where(key)}) {relation} {name} {src!r}: ftune never writes where it "
                    f"reads a model, which would mix its logs into the input's files. Accepted: a folder outside "
                    f"{folder}. Set {key} to another folder, e.g. {key}=${{output_dir}}/logs."
                )
                break
    return problems


OUTPUT_KEYS = ("output_dir", "log_dir")  # the folders a run writes into (a leaf key of these names)


def outputs_in_files(cfg) -> list[str]:
    """Problems for an output folder (`output_dir`, `checkpointer.output_dir`, `metric_logger.log_dir`...)
    that is a file or lies below one: found with a stat, before torch is imported. A folder below
    another refused one (``${output_dir}/logs``) is not named a second time."""
    leaves = [(k, v) for k, v in _leaves(cfg.to_dict()) if isinstance(v, str) and v.strip()]
    wanted = sorted(
        ((k, v, Path(v).expanduser()) for k, v in leaves if k.rpartition(".")[2] in OUTPUT_KEYS),
        key=lambda kvp: len(kvp[2].parts),
    )
    refused: list[Path] = []
    problems = []
    for key, given, path in wanted:
        if any(path == r or r in path.parents for r in refused):
            continue
        blocking = path if path.exists() and not path.is_dir() else _file_in_the_way(path)
        if blocking is None:
            continue
        refused.append(path)
        what = "is a file" if blocking == path else f"lies below the file {str(blocking)!r}"
        problems.append(
            f"{key}: {given!r} ({cfg.where(key)}) {what}: Not a directory; a part of this path is a file, not a "
            f"folder, and {key} must be a folder ftune can create or write into. Point {key} at a folder (a "
            "missing one is created), or move the file away."
        )
    return problems
