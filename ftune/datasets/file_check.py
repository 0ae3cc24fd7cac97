"""Say which line of a local data file is bad, when `datasets` fails to read it.

`datasets` reports a malformed JSONL line as a 70-line traceback from its Arrow reader without
the line number. `load_source` calls `diagnose` only after such a failure (no cost on success)
and raises its one-line message instead.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path


def _first_bad_line(path: Path) -> str | None:
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return (
                    f"{path}:{number}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1}). "
                    "Re-save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)."
                )
            if path.suffix.lower() == ".jsonl" and text.strip():
                try:
                    record = json.loads(text)
                except json.JSONDecodeError as e:
                    return (
                        f"{path}:{number}: not valid JSON ({e.msg} at column {e.colno}): {text.strip()[:80]!r}. "
                        "Each line of a .jsonl file must be one JSON object: fix or delete that line."
                    )
                if not isinstance(record, dict):
                    return (
                        f"{path}:{number}: a JSON {type(record).__name__}, not an object. Each line of a "
                        '.jsonl file must be one JSON object such as {"input": ..., "output": ...}.'
                    )
    if path.suffix.lower() == ".json":
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            return (
                f"{path}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno}). Fix the file at that line."
            )
    return None


def check_utf8(path: Path) -> None:
    """Raise unless `path` is UTF-8 (datasets would silently replace the bad bytes).

    Read in 1 MiB chunks through an incremental decoder: C speed, no second copy of the file.

    Raises:
        ValueError: naming file:line, the byte and the fix.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError:
                raise ValueError(f"Dataset source {_first_bad_line(path)}") from None
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise ValueError(f"Dataset source {path}: ends inside a UTF-8 character (truncated file?).") from None


def diagnose(path: Path) -> str | None:
    """The first problem of a local data file as `file:line: what, fix`, or None if none is found."""
    if path.stat().st_size == 0:
        return f"{path} is empty: it holds no training examples. Point the dataset's source at a file with records."
    return _first_bad_line(path)
