"""Load a dataset's records from a hub id, a local file or a local folder, by the same arguments.

    source="tatsu-lab/alpaca"                       a Hugging Face Hub dataset id
    source="data/train.jsonl"                       a local file: .json .jsonl .csv .parquet .txt
    source="data/"                                  a local folder (datasets infers the format)
    source="json", data_files="data/train.json"     a `datasets` builder name with files

When the Hub is not reachable (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set, or no network) a hub
id is looked up in the local `datasets` cache only, and fails at once with one error that names
the source and says to pass a local file: no retry loop.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ftune.config.data_files import (
    BUILDERS,
    SUFFIX_TO_BUILDER,
    check_local_source,
    diagnose,
    json_records,
    local_data_files,
)

if TYPE_CHECKING:
    import datasets

log = logging.getLogger(__name__)

_TRUE = {"1", "ON", "YES", "TRUE"}
_PROBE_TIMEOUT_S = 2.0


class HubUnreachableError(ConnectionError):
    """A hub dataset id was given but the Hugging Face Hub cannot be reached (and it is not cached)."""


def _env_offline() -> bool:
    return any(os.environ.get(k, "").upper() in _TRUE for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def _hub_reachable(timeout: float = _PROBE_TIMEOUT_S) -> bool:
    """One TCP connect to the hub endpoint, bounded in time (DNS included, via a worker thread)."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)

    def connect() -> bool:
        with socket.create_connection((host, port), timeout=timeout):
            return True

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(connect).result(timeout=timeout)
    except Exception:  # DNS failure, refused, timed out: all mean "not reachable now"
        return False
    finally:
        pool.shutdown(wait=False)  # a hung DNS lookup must not hold us up


@contextlib.contextmanager
def _offline_mode() -> Iterator[None]:
    """Make `datasets` and `huggingface_hub` offline for one call.

    Both read HF_HUB_OFFLINE once, at import, into module constants; setting the environment
    variable now would not reach them, so the constants are switched for the duration.
    """
    import datasets.config
    import huggingface_hub.constants

    saved = datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    os.environ.update({k: "1" for k in env})
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _offline_message(source: str, reason: str) -> str:
    return (
        f"Cannot load dataset source {source!r}: it is not a local file or folder, so it was taken as a "
        f"Hugging Face Hub dataset id, but {reason} and it is not in the local datasets cache. "
        "Pass a local file instead: source=path/to/data.jsonl (.json, .jsonl, .csv, .parquet or .txt), "
        "a folder of such files, or source=json data_files=path/to/data.json."
    )


def load_source(
    source: str,
    *,
    data_files: str | list[str] | dict[str, Any] | None = None,
    split: str = "train",
    name: str | None = None,
    cache_dir: str | None = None,
) -> datasets.Dataset:
    """Load records as a `datasets.Dataset`.

    Args:
        source: a hub id, a local file or folder, or a builder name ("json", "csv", "parquet",
            "text", "arrow") used together with `data_files`.
        data_files: files for a builder name or a folder (passed to `datasets.load_dataset`).
        split: split to load; slicing works ("train[:90%]"). A single local file is split "train".
        name: the dataset configuration name (hub datasets with several configurations).
        cache_dir: `datasets` cache folder (default: the `datasets` default).

    Returns:
        A `datasets.Dataset`.

    Raises:
        FileNotFoundError: `source` looks like a path but does not exist.
        ValueError: a local file with an unsupported suffix, or a builder name without `data_files`.
        HubUnreachableError: a hub id while the hub is unreachable and the dataset is not cached.
    """
    import datasets

    kwargs: dict[str, Any] = {"split": split, "cache_dir": cache_dir}
    path = Path(source).expanduser()
    check_local_source(source, data_files)
    if path.is_file():
        builder = SUFFIX_TO_BUILDER[path.suffix.lower()]
        with _reported(source, str(path), builder, what="source"):
            records = datasets.load_dataset(builder, data_files=str(path), name=name, **kwargs)
        if builder == "json" and _has_temporal(records.features):
            return _strings_kept(path, split, records)
        return records
    if path.is_dir():
        with _reported(source, data_files, str(path)):
            return datasets.load_dataset(str(path), data_files=data_files, name=name, **kwargs)
    if source in BUILDERS:
        with _reported(source, data_files, source):
            return datasets.load_dataset(source, data_files=data_files, name=name, **kwargs)
    return _load_hub(source, data_files=data_files, name=name, **kwargs)


def _root_cause(e: BaseException) -> BaseException:
    while e.__cause__ is not None or (e.__context__ is not None and not e.__suppress_context__):
        e = e.__cause__ or e.__context__
    return e


@contextlib.contextmanager
def _reported(source: str, data_files: Any, builder: str, what: str = "data_files") -> Iterator[None]:
    """`datasets`' failure to read local files as one ftune error naming the file (and line when found)."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - datasets raises its own errors, wrapping Arrow's
        for file in local_data_files(data_files):
            if file.is_file() and (problem := diagnose(file, builder)) is not None:
                raise ValueError(f"Dataset {what} {problem}") from None
        cause = _root_cause(e)
        said = " ".join(str(cause).split())[:200].rstrip(".") or type(cause).__name__
        raise ValueError(
            f"Dataset source {source!r} (data_files {data_files!r}): `datasets` could not read it with the "
            f"{builder!r} builder: {type(cause).__name__}: {said}. Check that each file is {builder} data, or "
            f"give the builder that matches the files ({', '.join(BUILDERS)})."
        ) from None


def _has_temporal(feature: Any) -> bool:
    """Whether Arrow typed a value as a date or time (it does so for strings such as "2024-01-01")."""
    if isinstance(feature, dict):
        return any(_has_temporal(f) for f in feature.values())
    if isinstance(feature, (list, tuple)):
        return any(_has_temporal(f) for f in feature)
    inner = getattr(feature, "feature", None)  # List, Sequence, LargeList
    if inner is not None:
        return _has_temporal(inner)
    dtype = str(getattr(feature, "dtype", ""))
    return dtype.startswith(("timestamp", "date", "time", "duration"))


def _strings_kept(path: Path, split: str, typed: datasets.Dataset) -> datasets.Dataset:
    """The records of a JSON file with every string kept a string, read again with `json`.

    Arrow's JSON reader (behind `datasets`) turns strings that look like dates into timestamps,
    so an answer "2024-01-01" would come back as a datetime (or "2024-01-01 00:00:00").
    """
    import datasets

    lines = json_records(path)
    if lines is None:
        log.warning(
            "%s: datasets typed some values as dates or times (%s) and the file's layout cannot be re-read "
            "as plain JSON records; those values are kept as datasets read them.",
            path,
            typed.features,
        )
        return typed
    log.info("%s: values that look like dates are kept as strings (read again with json)", path)
    records = datasets.Dataset.from_list([record for _, record in lines])
    parts = datasets.ReadInstruction.from_spec(split).to_absolute({"train": len(records)})
    if len(parts) == 1 and (parts[0].from_, parts[0].to) == (0, len(records)):
        return records
    return datasets.concatenate_datasets([records.select(range(p.from_, p.to)) for p in parts])


def _load_hub(source: str, **kwargs: Any) -> datasets.Dataset:
    import datasets

    start = time.monotonic()
    if _env_offline():
        reason = "offline mode is set (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE)"
    elif not _hub_reachable():
        reason = "the Hub could not be reached (no network)"
    else:
        reason = None
    if reason is None:
        return datasets.load_dataset(source, **kwargs)
    log.info("dataset %r: %s; looking in the local datasets cache only", source, reason)
    try:
        with _offline_mode():
            return datasets.load_dataset(source, **kwargs)
    except Exception as e:  # any failure here means "not cached"
        log.debug("offline load of %r failed after %.2f s: %r", source, time.monotonic() - start, e)
        # `from None`: the user gets one error that says what to do, not datasets' internals
        raise HubUnreachableError(_offline_message(source, reason)) from None
