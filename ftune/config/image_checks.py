"""Images of a multimodal record: where each comes from, read with Pillow, checked without torch.

A record's images are the ``{"type": "image", ...}`` parts of its messages' content, as transformers'
chat templates take them, in order. A part holds its image under "image", "path" or "url" (a local
path, relative to the data file's folder; a ``data:image/...;base64,`` URI; raw bytes, as parquet
stores them; a ``{"bytes", "path"}`` mapping, as `datasets`' Image feature stores them; or a PIL
image, as it decodes them). A part with none of those takes the next image of the record's images
column (``"images"``: TRL's and LLaVA's layout). A URL is refused: runs read local data only.

`ftune run` calls `check_image_rows` on a local data file before the model loads
(ftune.cli.fast_check), so a missing file, corrupt bytes or a wrong type is one error naming the
data file, the row and the image; the dataset calls it again on every record when it loads.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from ftune.config.data_files import json_records

IMAGE_KEYS = ("image", "path", "url")
_SHOWN = 5  # bad images quoted in one message; the rest are counted


class ImageReadError(ValueError):
    """An image of a record cannot be read (the message names the record, the image and the fix)."""


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return f"a {type(value).__name__} ({' '.join(repr(value).split())[:60]})"


def _decoded(data: bytes, what: str) -> Image.Image:
    try:
        image = Image.open(io.BytesIO(data))
        image.load()  # decode now: a truncated file fails here, not inside a DataLoader worker
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        said = (
            "no image format Pillow knows"
            if isinstance(e, UnidentifiedImageError)
            else " ".join(str(e).split())[:120]
        )
        raise ImageReadError(
            f"{what} cannot be decoded as an image ({type(e).__name__}: {said}); store PNG, JPEG, WEBP, GIF or BMP "
            "data, or fix or delete the record"
        ) from None
    return image


def read_image(value: Any, base_dir: Path | None = None, what: str = "the image") -> Image.Image:
    """Read one image from any of the sources the module docstring lists.

    Args:
        value: the image part's value (path, data URI, bytes, {"bytes", "path"} mapping, PIL image).
        base_dir: the folder relative paths are read from (the data file's folder); None: the working directory.
        what: names the image in a message (e.g. ``messages[0].content[1].image``).

    Returns:
        The decoded PIL image (its pixels loaded).

    Raises:
        ImageReadError: a missing or unreadable file, bytes that are no image, a URL, a value of another type.
    """
    if isinstance(value, Image.Image):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _decoded(bytes(value), f"{what} ({len(value)} bytes)")
    if isinstance(value, Mapping) and ("bytes" in value or "path" in value):
        if value.get("bytes") is not None:
            return read_image(value["bytes"], base_dir, f"{what}.bytes")
        return read_image(value.get("path"), base_dir, f"{what}.path")
    if isinstance(value, str) and value.startswith("data:"):
        head, _, payload = value.partition(",")
        if not head.endswith(";base64"):
            raise ImageReadError(
                f"{what} is a data URI without ';base64' ({value[:40]!r}); write data:image/png;base64,<data>"
            )
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ImageReadError(
                f"{what} is a data URI whose base64 payload is not valid base64 ({value[:40]!r}...)"
            ) from None
        return _decoded(data, f"{what} (a base64 data URI)")
    if isinstance(value, str) and value.split("://", 1)[0] in ("http", "https", "ftp", "s3", "gs"):
        raise ImageReadError(
            f"{what} is a URL ({value[:80]!r}); ftune reads images from local files only: download it and "
            "write its local path"
        )
    if isinstance(value, str) and value:
        path = Path(value).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_file():
            where = (
                f" (relative paths are read from {base_dir})"
                if base_dir is not None and not Path(value).is_absolute()
                else ""
            )
            raise ImageReadError(
                f"{what}: image file {str(path)!r} does not exist{where}; fix the path or add the file"
            )
        return _decoded(path.read_bytes(), f"{what}: image file {str(path)!r}")
    raise ImageReadError(
        f"{what} is {_kind(value)}, not an image; give a local path, a data:image/...;base64 URI, image bytes, "
        "a {'bytes': ..., 'path': ...} mapping or a PIL image"
    )


def image_sources(
    record: Mapping[str, Any], messages_column: str, images_column: str
) -> list[tuple[str, Any]]:
    """Each image of a record, in prompt order, as (what, value): an image part's own value, or the next
    value of the images column for a part that has none.

    Raises:
        ImageReadError: more image parts without a value than the images column holds, or the reverse.
    """
    pool = record.get(images_column)
    pool = (
        []
        if pool is None
        else list(pool)
        if isinstance(pool, Sequence) and not isinstance(pool, (str, bytes))
        else [pool]
    )
    out, used = [], 0
    messages = record.get(messages_column)
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        content = message.get("content") if isinstance(message, Mapping) else None
        for j, part in enumerate(content if isinstance(content, list) else []):
            if not (isinstance(part, Mapping) and part.get("type") == "image"):
                continue
            where = f"{messages_column}[{i}].content[{j}]"
            key = next((k for k in IMAGE_KEYS if part.get(k) is not None), None)
            if key is not None:
                out.append((f"{where}.{key}", part[key]))
            elif used < len(pool):
                out.append((f"{images_column}[{used}] (for {where})", pool[used]))
                used += 1
            else:
                raise ImageReadError(
                    f"{where} is an image part without an image ('image', 'path' or 'url'), and column "
                    f"{images_column!r} has {len(pool)} image(s) for {used + 1} such part(s); add the image to the part "
                    f"or to {images_column!r}"
                )
    if used < len(pool):
        raise ImageReadError(
            f"column {images_column!r} has {len(pool)} image(s) but the messages have {used} image part(s) "
            f"without an image; add a {{'type': 'image'}} part where each image goes, or remove the extra image(s)"
        )
    return out


def read_record_images(
    record: Mapping[str, Any], messages_column: str, images_column: str, base_dir: Path | None
) -> list[Image.Image]:
    """Every image of a record, read and decoded, in prompt order (see `image_sources`)."""
    return [
        read_image(value, base_dir, what)
        for what, value in image_sources(record, messages_column, images_column)
    ]


def check_image_rows(
    rows: Iterable[tuple[str, Any]],
    messages_column: str,
    images_column: str,
    base_dir: Path | None,
    source: str,
) -> int:
    """Read every image of every record; refuse the data when any cannot be read.

    Args:
        rows: (where, record) pairs; `where` is ``file:line`` or ``<source> row N``.
        messages_column: the column of the messages (the column map applied).
        images_column: the column of images for image parts without their own.
        base_dir: the folder relative image paths are read from.
        source: the dataset source, for the message.

    Returns:
        The number of images read.

    Raises:
        ImageReadError: every bad record (the first few quoted, the rest counted), naming row and image.
    """
    bad, count = [], 0
    for where, record in rows:
        if not isinstance(record, Mapping):
            bad.append(f"{where}: {_kind(record)}, not an object with {messages_column!r}.")
            continue
        try:
            count += len(read_record_images(record, messages_column, images_column, base_dir))
        except ImageReadError as e:
            bad.append(f"{where}: {e}.")
    if bad:
        more = f"\n  ... and {len(bad) - _SHOWN} more record(s) like these" if len(bad) > _SHOWN else ""
        raise ImageReadError(
            f"Dataset {source}: {len(bad)} record(s) have an image that cannot be read:\n  "
            + "\n  ".join(bad[:_SHOWN])
            + more
        )
    return count


# rows read from a parquet file at a time when checking it
_PARQUET_BATCH = 256


def local_rows(path: Path) -> Iterable[tuple[str, Any]] | None:
    """(where, record) for each record of a local .json/.jsonl (``file:line``) or .parquet (``file row N``) file.

    Returns:
        The rows, or None for another suffix or a .json file that is not a list of records.
    """
    suffix = path.suffix.lower()
    if suffix in (".json", ".jsonl"):
        lines = json_records(path)
        return None if lines is None else [(f"{path}:{number}", record) for number, record in lines]
    if suffix != ".parquet":
        return None
    import pyarrow.parquet  # ~0.6 s on 2 busy cores; only a parquet file's check needs it

    def rows() -> Iterable[tuple[str, Any]]:
        at = 0
        for batch in pyarrow.parquet.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH):
            for record in batch.to_pylist():
                at += 1
                yield f"{path} row {at}", record

    return rows()
