"""Finding a tokenizer file from a path that may be the file itself or the checkpoint folder."""

from __future__ import annotations

from pathlib import Path


def find_tokenizer_file(path: str | Path, names: tuple[str, ...], *, who: str) -> Path:
    """Return `path` if it is a file, else the first of `names` that exists inside the folder `path`.

    Args:
        path: a tokenizer file, or a folder (e.g. a checkpoint folder) holding one.
        names: file names to try inside a folder, in order (may contain sub-folders).
        who: the builder asking, named in the error message.

    Raises:
        FileNotFoundError: `path` does not exist, or the folder holds none of `names`.
    """
    p = Path(path).expanduser()
    if p.is_file():
        return p
    if p.is_dir():
        for name in names:
            if (p / name).is_file():
                return p / name
        raise FileNotFoundError(
            f"{who}: the folder {p} holds no tokenizer file; looked for {', '.join(names)}. "
            "Pass the path of the tokenizer file itself, or the folder that holds it."
        )
    raise FileNotFoundError(
        f"{who}: tokenizer path {p} does not exist. Expected a file or a folder holding one of "
        f"{', '.join(names)}."
    )
