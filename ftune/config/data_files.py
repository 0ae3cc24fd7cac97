"""Local data files checked without torch or `datasets`: the source, the bad line, the preference records.

`check_local_source` is what `ftune.datasets.load_source` refuses before it reads anything (a
missing, empty, non-UTF-8 or unsupported file, a builder name without files); `ftune run` calls it
before the recipe starts (ftune.cli.fast_check).

`datasets` reports a malformed JSONL line as a 70-line traceback from its Arrow reader without
the line number. `load_source` calls `diagnose` only after such a failure (no cost on success)
and raises its one-line message instead.

The preference checks (`check_preference_rows`) read a local file with the `json` module
(`json_records`), so they name file:line and run without torch or `datasets`: `ftune run` calls
them before the recipe starts (ftune.cli.fast_check), and `preference_dataset` again when it loads.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any


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


def diagnose(path: Path, builder: str | None = None) -> str | None:
    """The first problem of a local data file as `file:line: what, fix`, or None if none is found.

    Args:
        path: the file.
        builder: the `datasets` builder reading it (``source=json data_files=...``); None: the one
            its suffix names.
    """
    if path.stat().st_size == 0:
        return f"{path} is empty: it holds no training examples. Point the dataset's source at a file with records."
    if builder == "json" and path.suffix.lower() not in (".json", ".jsonl"):
        return _json_problem(path)
    if (builder or SUFFIX_TO_BUILDER.get(path.suffix.lower())) not in ("json", "csv", "text"):
        return None  # parquet and arrow are binary: `datasets` names their problems
    return _first_bad_line(path)


def _json_problem(path: Path) -> str | None:
    """What keeps `datasets`' json builder from reading a file of any suffix: one JSON document or JSON Lines."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return _first_bad_line(path)
    try:
        json.loads(text)
        return None
    except json.JSONDecodeError:
        pass
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            return (
                f"{path}:{number}: not valid JSON ({e.msg} at column {e.colno}): {line.strip()[:80]!r}. The json "
                "builder reads one JSON document or JSON Lines (one object a line): fix that line, or read the "
                f"file with its own builder ({', '.join(b for b in BUILDERS if b != 'json')})."
            )
        if not isinstance(record, dict):
            return (
                f"{path}:{number}: a JSON {type(record).__name__}, not an object. Each line of a JSON Lines "
                'file must be one JSON object such as {"input": ..., "output": ...}.'
            )
    return None


def local_data_files(data_files: Any) -> list[Path]:
    """The local paths named by `data_files` (a path, a list, or split -> path or list); globs and URLs left out."""
    if isinstance(data_files, Mapping):
        values = list(data_files.values())
    elif isinstance(data_files, (list, tuple)):
        values = list(data_files)
    else:
        values = [data_files]
    out = []
    for value in values:
        if isinstance(value, (list, tuple)):
            out += local_data_files(value)
        elif isinstance(value, (str, os.PathLike)):
            text = str(value)
            if "://" not in text and not any(c in text for c in "*?["):
                out.append(Path(text).expanduser())
    return out


def check_data_files(source: str, data_files: Any, *, every_line: bool, max_bytes: int = 64 << 20) -> None:
    """The files of ``source=<builder> data_files=...``: each must exist, hold records, be UTF-8 text
    for a text builder, and (with `every_line`) parse as the builder reads it.

    Raises:
        FileNotFoundError, ValueError: naming the file (and line), with the fix.

    Args:
        source: the builder name.
        data_files: as for `load_source`.
        every_line: parse each json file up to `max_bytes` (what `load_source` does only after `datasets` failed).
        max_bytes: the largest file parsed here.
    """
    for path in local_data_files(data_files):
        if not path.is_file():
            what = "is a folder, not a file" if path.is_dir() else "does not exist"
            raise FileNotFoundError(
                f"Dataset data_files {str(path)!r} {what} (source={source}, working directory: {os.getcwd()}). "
                "Check the path: data_files names the files the builder reads."
            )
        size = path.stat().st_size
        if size == 0 or (every_line and source == "json" and size <= max_bytes):
            if (problem := diagnose(path, source)) is not None:
                raise ValueError(f"Dataset data_files {problem}")
        if source in ("json", "csv", "text"):
            check_utf8(path)


def json_records(path: Path) -> list[tuple[int, Any]] | None:
    """Every record of a local .jsonl file, or of a .json file holding one list, with the line it starts on.

    Read with the `json` module, so every value keeps its JSON type: an answer "2024-01-01" stays a
    string (Arrow's JSON reader, behind `datasets`, would type it as a timestamp).

    Returns:
        (line, record) pairs, or None for another layout (a .json object, another suffix).

    Raises:
        ValueError: a line that is not valid JSON or not UTF-8 (file:line, as `diagnose` says it).
    """
    suffix = path.suffix.lower()
    if suffix not in (".json", ".jsonl"):
        return None
    check_utf8(path)
    text = path.read_text(encoding="utf-8")
    if suffix == ".jsonl":
        out = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    out.append((number, json.loads(line)))
                except json.JSONDecodeError:
                    raise ValueError(f"Dataset source {_first_bad_line(path)}") from None
        return out
    if suffix != ".json" or not text.lstrip().startswith("["):
        return None
    decoder, out = json.JSONDecoder(), []
    at, line = text.index("[") + 1, text.count("\n", 0, text.index("[")) + 1
    while True:
        start = at
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        line += text.count("\n", start, at)
        if at >= len(text) or text[at] == "]":
            return out
        try:
            record, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"Dataset source {path}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno}). "
                "Fix the file at that line."
            ) from None
        out.append((line, record))
        line += text.count("\n", at, end)
        at = end


PREFERENCE_FIELDS = ("prompt", "chosen", "rejected")
_SHOWN = 5  # bad records quoted in one message; the rest are counted


def _is_empty(value: Any) -> bool:
    """An answer with no text: "", whitespace, [] or a conversation whose last turn has empty content."""
    if isinstance(value, str):
        return not value.strip()
    if not value:
        return True
    last = value[-1]
    return isinstance(last, dict) and isinstance(last.get("content"), str) and not last["content"].strip()


def preference_record_problem(record: Any, columns: Mapping[str, str]) -> str | None:
    """What makes one preference record unusable, or None.

    Args:
        record: one row: {prompt: str, chosen: str, rejected: str}, or chosen/rejected as conversations.
        columns: "prompt", "chosen", "rejected" -> the data's column names (the column map applied).
    """
    fix_map = "or map your column with dataset.column_map={{{!r}: '<your column>'}}"
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object with {', '.join(repr(c) for c in columns.values())}"
    for side in ("chosen", "rejected"):
        name = columns[side]
        value = record.get(name)
        if value is None:
            what = f"{name!r} is null" if name in record else f"no {name!r}"
            return f"{what} (the record's keys: {sorted(record)}); add the {side} answer, delete the record, {fix_map.format(side)}"
        if not isinstance(value, (str, list)):
            return (
                f"{name!r} is a {type(value).__name__} ({value!r}), expected a string or a list of "
                '{"role": ..., "content": ...} messages; quote the answer in the file'
            )
        if _is_empty(value):
            return f"{name!r} is empty: an empty answer gives DPO nothing to score; write the answer or delete the record"
    if isinstance(record[columns["chosen"]], str) or isinstance(record[columns["rejected"]], str):
        prompt = record.get(columns["prompt"])
        if not isinstance(prompt, str) or not prompt.strip():
            what = (
                "is empty"
                if isinstance(prompt, str)
                else "is missing"
                if prompt is None
                else "is not a string"
            )
            return (
                f"the answers are strings, so the prompt {columns['prompt']!r} is needed, but it {what} "
                f"(the record's keys: {sorted(record)}); add it, delete the record, {fix_map.format('prompt')}"
            )
    return None


def check_margin_rows(rows: list[tuple[str, Any]], column: str, source: str) -> None:
    """Refuse a reward margin (``preference_dataset(margin_column=...)``) that is not a finite number.

    Args:
        rows: (where, record) pairs: ``file:line`` for a local file, ``row <n>`` otherwise.
        column: the margin column.
        source: the dataset's source, for the message.

    Raises:
        ValueError: naming the first bad row, its value and the fix.
    """
    for where, record in rows:
        value = record.get(column) if isinstance(record, dict) else None
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if number is None or number != number or abs(number) == float("inf"):
            raise ValueError(
                f"dataset.margin_column: {where} of {source} has {column}={value!r}; a reward margin must be a "
                "finite number (the pair's required r_chosen - r_rejected). Fix the row, or set "
                "dataset.margin_column=null to train without margins."
            )


def check_preference_rows(
    rows: Iterable[tuple[str, Any]], columns: Mapping[str, str], source: str
) -> list[str]:
    """Refuse preference rows that cannot train; return where chosen == rejected (a warning for the caller).

    Args:
        rows: (where, record) pairs; `where` is ``file:line`` or ``row N``.
        columns: "prompt", "chosen", "rejected" -> the data's column names.
        source: the dataset source, for the message.

    Returns:
        The `where` of every record whose chosen and rejected answers are equal.

    Raises:
        ValueError: every unusable record (the first few quoted, the rest counted), with the fix.
    """
    bad, identical = [], []
    for where, record in rows:
        problem = preference_record_problem(record, columns)
        if problem is not None:
            bad.append(f"{where}: {problem}.")
        elif record[columns["chosen"]] == record[columns["rejected"]]:
            identical.append(where)
    if bad:
        more = f"\n  ... and {len(bad) - _SHOWN} more record(s) like these" if len(bad) > _SHOWN else ""
        raise ValueError(
            f"Preference dataset {source}: {len(bad)} record(s) cannot train (each needs a prompt, a chosen "
            "and a rejected answer, none empty):\n  " + "\n  ".join(bad[:_SHOWN]) + more
        )
    return identical


def identical_pairs_warning(identical: Sequence[str], total: int, source: str) -> str:
    """The warning for records whose chosen answer equals the rejected one."""
    shown = ", ".join(identical[:_SHOWN]) + (", ..." if len(identical) > _SHOWN else "")
    return (
        f"Preference dataset {source}: {len(identical)} of {total} record(s) have chosen == rejected ({shown}). "
        "DPO learns nothing from such a pair (its margin is 0 whatever the weights): remove them, or check "
        "that the columns are not mapped to the same field."
    )


SUFFIX_TO_BUILDER = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}
BUILDERS = ("json", "csv", "parquet", "text", "arrow")


def looks_like_path(source: str) -> bool:
    return (
        source.startswith((".", "/", "~"))
        or "\\" in source
        or Path(source).suffix.lower() in SUFFIX_TO_BUILDER
        or source.count("/") > 1
    )


def check_local_source(source: str, data_files: Any = None, *, every_line: bool = False) -> None:
    """What `load_source` refuses before it reads anything, without `datasets` (``ftune run`` calls it early).

    Args:
        source: as for `load_source`.
        data_files: as for `load_source`.
        every_line: also parse every line of a .jsonl file (what `load_source` does only after
            `datasets` failed), to name a bad line before the model loads.

    Raises:
        FileNotFoundError: `source` looks like a path but does not exist.
        ValueError: an unsupported suffix, an empty or non-UTF-8 file, a bad JSON line (with
            `every_line`), or a builder name without `data_files`.
    """
    path = Path(source).expanduser()
    if path.is_file():
        builder = SUFFIX_TO_BUILDER.get(path.suffix.lower())
        if builder is None:
            raise ValueError(
                f"Dataset source {source!r} has suffix {path.suffix!r}; accepted file suffixes are "
                f"{sorted(SUFFIX_TO_BUILDER)}. Convert the file, or pass source=<builder> data_files={source} "
                f"with a builder from {list(BUILDERS)}."
            )
        if path.stat().st_size == 0:
            raise ValueError(f"Dataset source {diagnose(path)}")
        if builder in ("json", "csv", "text"):
            check_utf8(path)
        if every_line and (problem := diagnose(path)) is not None:
            raise ValueError(f"Dataset source {problem}")
    elif path.is_dir():
        return
    elif source in BUILDERS:
        if data_files is None:
            raise ValueError(
                f"Dataset source {source!r} is a file-format builder and needs data_files, e.g. "
                f"source={source} data_files=path/to/file; or pass the file path as source."
            )
        check_data_files(source, data_files, every_line=every_line)
    elif looks_like_path(source):
        raise FileNotFoundError(
            f"Dataset source {source!r} looks like a local path but does not exist (working directory: "
            f"{os.getcwd()}). Check the path, or pass a Hugging Face Hub id like 'owner/name'."
        )
