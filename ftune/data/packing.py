"""Sample packing: many short tokenized samples -> fixed-length rows of `max_seq_len` tokens.

Samples are laid out greedily in dataset order ("next fit"): a sample goes into the current
pack if it fits, otherwise the pack is closed (padded at its end only) and a new one starts.
Each row carries `input_pos` (positions restarting at 0 for every document) and
`document_ids` (0, 1, 2, ... within the row; the padding tail gets its own id), so the model
can build a document-causal mask and no token attends across documents.

The first label of every document in a pack is set to the ignore index: under the shifted
loss it would be predicted from the previous document's last token, which the document mask
hides. So the loss over a pack equals the sum of the losses of its samples run one by one.

The work is vectorised with numpy: the only Python loop runs once per pack (a binary
search for where the pack ends), never per token.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from ftune.data.collate import CROSS_ENTROPY_IGNORE_IDX, PACKED_KEYS

log = logging.getLogger(__name__)

Overlong = Literal["split", "truncate", "drop"]
OVERLONG_CHOICES = ("split", "truncate", "drop")
_CACHE_VERSION = 1


def _segments(lengths: np.ndarray, max_seq_len: int, overlong: str) -> tuple[np.ndarray, np.ndarray]:
    """(start in the flat token array, length) of every piece that goes into a pack."""
    starts = np.cumsum(lengths) - lengths
    if overlong == "drop":
        keep = lengths <= max_seq_len
        seg_start, seg_len = starts[keep], lengths[keep]
    elif overlong == "truncate":
        seg_start, seg_len = starts, np.minimum(lengths, max_seq_len)
    else:  # split: ceil(len / max_seq_len) pieces, each its own document
        n_pieces = -(-lengths // max_seq_len)
        sample = np.repeat(np.arange(len(lengths)), n_pieces)
        piece = np.arange(len(sample)) - np.repeat(np.cumsum(n_pieces) - n_pieces, n_pieces)
        seg_start = starts[sample] + piece * max_seq_len
        seg_len = np.minimum(max_seq_len, lengths[sample] - piece * max_seq_len)
    nonempty = seg_len > 0
    return seg_start[nonempty], seg_len[nonempty]


def _pack_starts(seg_len: np.ndarray, max_seq_len: int) -> np.ndarray:
    """Index of the first segment of every pack (next-fit; one binary search per pack)."""
    ends = np.cumsum(seg_len)
    firsts = []
    first, used_before = 0, 0
    while first < len(seg_len):
        firsts.append(first)
        # every segment whose end fits in this pack; at least one, since seg_len <= max_seq_len
        first = int(ends.searchsorted(used_before + max_seq_len, side="right"))
        used_before = int(ends[first - 1])
    return np.asarray(firsts, dtype=np.int64)


def pack_sequences(
    tokens: Sequence[Sequence[int]],
    labels: Sequence[Sequence[int]],
    *,
    max_seq_len: int,
    pad_id: int,
    overlong: Overlong = "split",
    ignore_idx: int = CROSS_ENTROPY_IGNORE_IDX,
) -> dict[str, np.ndarray]:
    """Pack tokenized samples into rows of exactly `max_seq_len` tokens.

    Args:
        tokens: token ids of each sample.
        labels: labels of each sample, aligned with its tokens.
        max_seq_len: length of every packed row.
        pad_id: token id of the padding at the end of a row.
        overlong: what to do with a sample longer than `max_seq_len`: "split" it into
            `max_seq_len` pieces (each its own document), "truncate" it, or "drop" it.
        ignore_idx: label of padding and of every document's first position.

    Returns:
        {"tokens", "labels", "input_pos", "document_ids"}: int32 arrays [num_packs, max_seq_len].

    Raises:
        ValueError: bad `max_seq_len` or `overlong`, or a sample whose tokens and labels differ in length.
    """
    if max_seq_len <= 0:
        raise ValueError(f"pack_sequences: max_seq_len must be a positive int, got {max_seq_len}.")
    if overlong not in OVERLONG_CHOICES:
        raise ValueError(f"pack_sequences: overlong={overlong!r} is not one of {OVERLONG_CHOICES}.")
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    label_lengths = np.fromiter((len(t) for t in labels), dtype=np.int64, count=len(labels))
    if lengths.shape != label_lengths.shape or (lengths != label_lengths).any():
        bad = int(np.argmax(lengths != label_lengths)) if lengths.shape == label_lengths.shape else None
        raise ValueError(
            f"pack_sequences: tokens and labels must be aligned; sample {bad} differs in length "
            f"({len(tokens)} token rows, {len(labels)} label rows)."
        )
    total = int(lengths.sum())
    flat_tokens = np.fromiter(itertools.chain.from_iterable(tokens), dtype=np.int64, count=total)
    flat_labels = np.fromiter(itertools.chain.from_iterable(labels), dtype=np.int64, count=total)

    seg_start, seg_len = _segments(lengths, max_seq_len, overlong)
    firsts = _pack_starts(seg_len, max_seq_len)
    num_packs, num_segs = len(firsts), len(seg_len)
    segs_per_pack = np.diff(np.append(firsts, num_segs))
    seg_pack = np.repeat(np.arange(num_packs), segs_per_pack)
    seg_begin = np.cumsum(seg_len) - seg_len  # offset in the concatenation of all segments
    seg_offset = seg_begin - seg_begin[firsts][seg_pack]  # offset inside its pack
    seg_doc = np.arange(num_segs) - firsts[seg_pack]
    used = np.bincount(seg_pack, weights=seg_len, minlength=num_packs).astype(np.int64)

    # one entry per packed token: which segment, where it comes from, where it goes
    tok_seg = np.repeat(np.arange(num_segs), seg_len)
    within = np.arange(int(seg_len.sum())) - seg_begin[tok_seg]
    src = seg_start[tok_seg] + within
    dst = seg_pack[tok_seg] * max_seq_len + seg_offset[tok_seg] + within

    col = np.arange(max_seq_len)[None, :]
    out = {
        "tokens": np.full((num_packs, max_seq_len), pad_id, dtype=np.int32),
        "labels": np.full((num_packs, max_seq_len), ignore_idx, dtype=np.int32),
        # the padding tail is one more document, positions restarting at 0
        "input_pos": np.maximum(col - used[:, None], 0).astype(np.int32),
        "document_ids": np.broadcast_to(segs_per_pack[:, None], (num_packs, max_seq_len)).astype(np.int32),
    }
    out["tokens"].reshape(-1)[dst] = flat_tokens[src]
    out["labels"].reshape(-1)[dst] = flat_labels[src]
    out["labels"].reshape(-1)[seg_pack * max_seq_len + seg_offset] = ignore_idx
    out["input_pos"].reshape(-1)[dst] = within
    out["document_ids"].reshape(-1)[dst] = seg_doc[tok_seg]
    n_overlong = int((lengths > max_seq_len).sum())
    action = {"split": "split", "truncate": "truncated", "drop": "dropped"}[overlong]
    fill = 100 * float(used.sum()) / max(num_packs * max_seq_len, 1)
    log.info(
        "packed %d samples into %d rows of %d tokens (%.1f%% filled; %d over-long samples %s)",
        *(len(lengths), num_packs, max_seq_len, fill, n_overlong, action),
    )
    return out


def _hash(parts: dict[str, Any], arrays: Sequence[np.ndarray] = ()) -> str:
    h = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode())
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:24]


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, path)  # atomic: a reader never sees a half-written cache file


class PackedDataset(torch.utils.data.Dataset):
    """A map-style dataset of packed rows built from a tokenized dataset.

    Args:
        dataset: items {"tokens": list[int], "labels": list[int]} (any sequence, e.g. an SFTDataset).
        max_seq_len: length of every packed row.
        pad_id: token id used for the padding tail of a row.
        overlong: "split", "truncate" or "drop" samples longer than `max_seq_len`.
        cache_dir: when set, the packed arrays are saved there and reused on the next run.
        cache_key: a string identifying the dataset's content (source, transform, tokenizer).
            With it, a cache hit skips tokenization altogether; without it the key is a hash
            of the tokenized samples, so only the packing itself is saved.

    Items are {"tokens", "labels", "input_pos", "document_ids"}: lists of `max_seq_len` ints.
    """

    def __init__(
        self,
        dataset: Sequence[dict[str, Any]],
        *,
        max_seq_len: int,
        pad_id: int,
        overlong: Overlong = "split",
        cache_dir: str | os.PathLike | None = None,
        cache_key: str | None = None,
    ) -> None:
        self.max_seq_len = max_seq_len
        params = {"v": _CACHE_VERSION, "max_seq_len": max_seq_len, "pad_id": pad_id, "overlong": overlong}
        path = None
        if cache_dir is not None and cache_key is not None:
            path = Path(cache_dir) / f"packed-{_hash({**params, 'key': cache_key})}.npz"
            if path.is_file():
                self._arrays = self._load(path)
                return
        tokens, labels = [], []
        for i in range(len(dataset)):
            item = dataset[i]
            tokens.append(item["tokens"])
            labels.append(item["labels"])
        if cache_dir is not None and cache_key is None:
            lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
            flat = [
                np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64) for rows in (tokens, labels)
            ]
            path = Path(cache_dir) / f"packed-{_hash(params, [lengths, *flat])}.npz"
            if path.is_file():
                self._arrays = self._load(path)
                return
        self._arrays = pack_sequences(
            tokens, labels, max_seq_len=max_seq_len, pad_id=pad_id, overlong=overlong
        )
        if path is not None:
            _save_npz(path, self._arrays)
            log.info("saved packed dataset cache to %s", path)
        self.cache_path = path

    def _load(self, path: Path) -> dict[str, np.ndarray]:
        log.info("loading packed dataset from cache %s", path)
        self.cache_path = path
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in PACKED_KEYS}

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The packed int32 arrays [num_packs, max_seq_len], keyed like the items."""
        return self._arrays

    def __len__(self) -> int:
        return len(self._arrays["tokens"])

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return {k: self._arrays[k][index].tolist() for k in PACKED_KEYS}
