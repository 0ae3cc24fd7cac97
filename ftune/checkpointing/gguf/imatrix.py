"""Importance matrices in llama.cpp's GGUF imatrix file: read, write, and the weights quantization uses.

    imatrix = read_imatrix("model.imatrix.gguf")        # made by `ftune export imatrix` or llama-imatrix
    weights = imatrix.weights("blk.0.ffn_down.weight")  # float32 (cols,), or (experts, cols); None if absent
    write_imatrix("out.imatrix.gguf", imatrix)

The statistic (llama.cpp's `llama-imatrix`): for each weight matrix of the decoder blocks, the sum over
calibration tokens of the squared input activation of each input column (`in_sum2`), and the number
of tokens summed (`counts`); a mixture of experts' stacked matrices hold one row a expert, each with
its own count. Quantization weights a column by `in_sum2 / count` (a count of 0 gives 1), as
`llama-quantize --imatrix` does. The file (what llama-imatrix writes by default since mid-2025):
`general.type = "imatrix"`, `imatrix.datasets` (the text files), `imatrix.chunk_count`,
`imatrix.chunk_size`, and per matrix the F32 tensors `<name>.in_sum2` (experts, cols) and
`<name>.counts` (experts, 1); llama-imatrix also writes `<name>.in_sum` (the plain sums), which
quantization does not read. The older `.dat` format is refused with the command that converts it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from ftune.checkpointing.atomic import atomic_path

logger = logging.getLogger(__name__)

_SUMS, _COUNTS = ".in_sum2", ".counts"


@dataclass
class ImportanceMatrix:
    """Per weight matrix (GGUF name), summed squared inputs and token counts.

    Attributes:
        sums: name -> float32 (matrices, cols): the sum of squared inputs of each column.
        counts: name -> float32 (matrices,): tokens summed (one a expert for stacked experts).
        datasets: the calibration files it was computed from.
        chunk_count: calibration chunks run.
        chunk_size: tokens a chunk.
    """

    sums: dict[str, np.ndarray] = field(default_factory=dict)
    counts: dict[str, np.ndarray] = field(default_factory=dict)
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0

    def weights(self, name: str) -> np.ndarray | None:
        """The quantization weights of matrix `name`: `in_sum2 / count` as float32 ((cols,) for a matrix,
        (experts, cols) for stacked experts), 1 where nothing was counted; None without an entry."""
        if name not in self.sums:
            return None
        sums, counts = self.sums[name], self.counts[name].reshape(-1, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(counts > 0, sums / counts, np.float32(1)).astype(np.float32)
        return out[0] if len(out) == 1 else out


def read_imatrix(path: str | os.PathLike) -> ImportanceMatrix:
    """Read a GGUF imatrix file (llama-imatrix's default format, or `write_imatrix`'s).

    Raises:
        ValueError: the file is not a GGUF imatrix (a legacy .dat file, a model file), or an entry lacks
            its counts; the message says how to make or convert one.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"importance matrix {path} does not exist. Make one with `ftune export imatrix MODEL OUT.gguf "
            "--text FILE` (or llama.cpp's llama-imatrix) and pass that file."
        )
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(
            f"importance matrix {path} is not a GGUF file (llama.cpp's older .dat format?). Convert it with "
            f"`llama-imatrix --in-file {path.name} -o {path.stem}.gguf`, or make one with `ftune export imatrix`."
        )
    reader = gguf.GGUFReader(path)
    kind = reader.get_field("general.type")
    if kind is None or kind.contents() != "imatrix":
        raise ValueError(
            f"{path} is a GGUF file but not an importance matrix (general.type is "
            f"{kind.contents() if kind else 'missing'!r}, want 'imatrix'). Pass the file llama-imatrix or "
            "`ftune export imatrix` wrote."
        )
    tensors = {t.name: np.array(t.data, dtype=np.float32) for t in reader.tensors}
    out = ImportanceMatrix()
    for key, data in tensors.items():
        if not key.endswith(_SUMS):
            continue
        name = key[: -len(_SUMS)]
        if name + _COUNTS not in tensors:
            raise ValueError(
                f"{path}: entry {name!r} has {key} but no {name}{_COUNTS}; the file is incomplete."
            )
        out.sums[name] = data.reshape(-1, data.shape[-1])
        out.counts[name] = tensors[name + _COUNTS].reshape(-1)
    datasets = reader.get_field("imatrix.datasets")
    out.datasets = list(datasets.contents()) if datasets is not None else []
    for attr, key in (("chunk_count", "imatrix.chunk_count"), ("chunk_size", "imatrix.chunk_size")):
        value = reader.get_field(key)
        setattr(out, attr, int(value.contents()) if value is not None else 0)
    return out


def write_imatrix(path: str | os.PathLike, imatrix: ImportanceMatrix) -> Path:
    """Write `imatrix` as llama.cpp's GGUF imatrix file (entries in sorted name order, as llama-imatrix)."""
    writer = gguf.GGUFWriter(None, "")
    writer.kv_data[0].pop(gguf.Keys.General.ARCHITECTURE, None)  # llama-imatrix writes no architecture
    writer.add_string("general.type", "imatrix")
    writer.add_array("imatrix.datasets", list(imatrix.datasets))
    writer.add_uint32("imatrix.chunk_count", imatrix.chunk_count)
    writer.add_uint32("imatrix.chunk_size", imatrix.chunk_size)
    for name in sorted(imatrix.sums):
        sums = np.ascontiguousarray(imatrix.sums[name], dtype=np.float32)
        writer.add_tensor(name + _SUMS, sums.reshape(-1, sums.shape[-1]))
        writer.add_tensor(name + _COUNTS, np.asarray(imatrix.counts[name], dtype=np.float32).reshape(-1, 1))
    out = Path(path)
    with atomic_path(out) as tmp:
        writer.write_header_to_file(tmp)
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return out


def read_imatrix_for(path: str | os.PathLike, ftype: Any) -> ImportanceMatrix:
    """`read_imatrix(path)` for an export of file type `ftype` (`export_types.FileType`), which must be a
    type llama-quantize makes (an importance matrix changes nothing in f32, f16, bf16 or q8_0 files)."""
    if not ftype.requantized:
        raise ValueError(
            f"--imatrix was given with --type {ftype.name}, which an importance matrix does not change (llama.cpp "
            "uses it only when it quantizes to 6 bits or fewer). Use it with q6_k, q5_k_m, q5_k_s, q4_k_m, "
            "q4_k_s or q4_0, or drop --imatrix."
        )
    return read_imatrix(path)


def imatrix_weights(
    imatrix: ImportanceMatrix, tensors: Mapping[str, Any], path: str | os.PathLike, writer: gguf.GGUFWriter
) -> dict[str, np.ndarray]:
    """The quantization weights of each tensor of `tensors` (GGUF name -> torch tensor) that `imatrix` has,
    checked against its shape; the `quantize.imatrix.*` keys llama-quantize writes go to `writer`.

    Tensors without an entry (the token embedding, the output projection unless it was collected, a
    router) are quantized without one, as llama.cpp does.

    Raises:
        ValueError: an entry's columns or experts differ from the tensor's (an importance matrix of
            another model), naming both shapes.
    """
    out = {}
    for name, value in tensors.items():
        weights = imatrix.weights(name)
        if weights is None or len(value.shape) < 2:
            continue
        want = (
            (int(value.shape[-1]),) if len(value.shape) == 2 else (int(value.shape[0]), int(value.shape[-1]))
        )
        if weights.shape != want:
            if name == "token_embd.weight":
                continue  # llama.cpp ignores such an entry for the embedding too
            raise ValueError(
                f"importance matrix {path}: entry {name} has {weights.size} values (shape {weights.shape}) but "
                f"the model's tensor needs {want} (its input columns{' per expert' if len(want) == 2 else ''}). "
                "The file was made for another model: make one for this model with `ftune export imatrix`."
            )
        out[name] = weights
    unused = sorted(set(imatrix.sums) - set(out))
    if unused:
        logger.warning(
            "importance matrix %s: %d entries match no tensor (e.g. %s)", path, len(unused), unused[0]
        )
    logger.info("importance matrix %s: weights for %d of %d tensors", path, len(out), len(tensors))
    writer.add_string("quantize.imatrix.file", str(path))
    if imatrix.datasets:
        writer.add_string("quantize.imatrix.dataset", imatrix.datasets[0])
    writer.add_int32("quantize.imatrix.entries_count", len(imatrix.sums))
    writer.add_int32("quantize.imatrix.chunks_count", imatrix.chunk_count)
    return out
