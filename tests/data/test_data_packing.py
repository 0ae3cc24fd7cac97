import time

import numpy as np
import pytest

from ftune.data import packing
from ftune.data.packing import PackedDataset, pack_sequences


def _pack(samples, max_seq_len, overlong="split", pad_id=0):
    return pack_sequences(
        samples, [list(s) for s in samples], max_seq_len=max_seq_len, pad_id=pad_id, overlong=overlong
    )


def test_small_pack_exact_values():
    out = _pack([[1, 2, 3], [4, 5], [6, 7, 8, 9]], max_seq_len=6)
    assert out["tokens"].tolist() == [[1, 2, 3, 4, 5, 0], [6, 7, 8, 9, 0, 0]]
    # each document's first label is ignored: under the shifted loss it would be predicted across documents
    assert out["labels"].tolist() == [[-100, 2, 3, -100, 5, -100], [-100, 7, 8, 9, -100, -100]]
    assert out["input_pos"].tolist() == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]]
    assert out["document_ids"].tolist() == [[0, 0, 0, 1, 1, 2], [0, 0, 0, 0, 1, 1]]


def test_random_packs_keep_every_sample_in_order_and_pad_only_at_the_end():
    rng = np.random.default_rng(0)
    samples = [rng.integers(1, 1000, rng.integers(1, 30)).tolist() for _ in range(300)]
    labels = [[t if rng.random() < 0.7 else -100 for t in s] for s in samples]
    L = 32
    out = pack_sequences(samples, labels, max_seq_len=L, pad_id=0)
    assert all(v.shape == (len(out["tokens"]), L) for v in out.values())
    docs = []
    for tok, lab, pos, doc in zip(out["tokens"], out["labels"], out["input_pos"], out["document_ids"]):
        used = int((tok != 0).sum())  # sample tokens are never 0, the pad id
        # padding, if any, is one trailing run with its own document id, ignored labels and positions from 0
        assert (tok[:used] != 0).all() and (tok[used:] == 0).all() and (lab[used:] == -100).all()
        assert (doc[used:] == doc[used - 1] + 1).all()
        assert pos[used:].tolist() == list(range(L - used))
        assert (np.diff(doc[:used]) >= 0).all()
        for d in range(doc[:used].max() + 1):
            sel = doc[:used] == d
            assert pos[:used][sel].tolist() == list(range(sel.sum()))  # positions restart per document
            docs.append((tok[:used][sel].tolist(), lab[:used][sel].tolist()))
    assert [d[0] for d in docs] == samples
    for (_, packed_labels), orig in zip(docs, labels):
        assert packed_labels == [-100] + orig[1:]
    # greedy next fit: a pack is closed only when the next sample does not fit
    starts = [0]
    for s in samples:
        if starts[-1] + len(s) > L:
            starts.append(0)
        starts[-1] += len(s)
    assert len(starts) == len(out["tokens"])


def test_shifted_targets_equal_the_unpacked_ones():
    # the (context, target) pairs the shifted loss sees are the same packed or not
    samples = [[1, 2, 3, 4], [5, 6], [7, 8, 9]]
    labels = [[-100, -100, 3, 4], [5, 6], [-100, 8, 9]]
    out = pack_sequences(samples, labels, max_seq_len=16, pad_id=0)
    packed_pairs = [
        (int(d), int(p))
        for d, p, y in zip(out["document_ids"][0][:-1], out["input_pos"][0][:-1], out["labels"][0][1:])
        if y != -100
    ]
    unpacked_pairs = [
        (d, t) for d, lab in enumerate(labels) for t in range(len(lab) - 1) if lab[t + 1] != -100
    ]
    assert packed_pairs == unpacked_pairs


def test_overlong_split_truncate_drop():
    samples = [[1, 2, 3, 4, 5, 6, 7], [8, 9]]
    split = _pack(samples, 3, "split")
    assert split["tokens"].tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert split["input_pos"].tolist() == [[0, 1, 2], [0, 1, 2], [0, 0, 1]]
    assert split["document_ids"].tolist() == [[0, 0, 0], [0, 0, 0], [0, 1, 1]]
    trunc = _pack(samples, 3, "truncate")
    assert trunc["tokens"].tolist() == [[1, 2, 3], [8, 9, 0]]
    drop = _pack(samples, 3, "drop")
    assert drop["tokens"].tolist() == [[8, 9, 0]]
    assert drop["document_ids"].tolist() == [[0, 0, 1]]


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"overlong='cut' is not one of \('split', 'truncate', 'drop'\)"):
        _pack([[1]], 4, "cut")
    with pytest.raises(ValueError, match="max_seq_len must be a positive int, got 0"):
        _pack([[1]], 0)
    with pytest.raises(ValueError, match="tokens and labels must be aligned; sample 1 differs in length"):
        pack_sequences([[1], [1, 2]], [[1], [1]], max_seq_len=4, pad_id=0)


def test_packing_10k_short_samples_is_fast():
    rng = np.random.default_rng(0)
    samples = [list(range(1, n + 1)) for n in rng.integers(8, 64, 10_000)]
    pack_sequences(samples[:100], samples[:100], max_seq_len=512, pad_id=0)  # warm up numpy
    start = time.perf_counter()
    out = pack_sequences(samples, samples, max_seq_len=512, pad_id=0)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"packing 10k samples took {elapsed:.2f} s"
    assert int((out["tokens"] != 0).sum()) == sum(len(s) for s in samples)  # every token placed once


class _Items:
    def __init__(self, samples):
        self.samples = samples
        self.reads = 0

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        self.reads += 1
        return {"tokens": self.samples[i], "labels": self.samples[i]}


def test_packed_dataset_items_are_lists():
    ds = PackedDataset(_Items([[1, 2], [3]]), max_seq_len=4, pad_id=0)
    assert len(ds) == 1
    assert ds[0] == {
        "tokens": [1, 2, 3, 0],
        "labels": [-100, 2, -100, -100],
        "input_pos": [0, 1, 0, 0],
        "document_ids": [0, 0, 1, 2],
    }


def test_cache_round_trip_with_key_skips_the_source(tmp_path):
    samples = [[i] * (i % 7 + 1) for i in range(1, 50)]
    first = PackedDataset(_Items(samples), max_seq_len=16, pad_id=0, cache_dir=tmp_path, cache_key="data-v1")
    assert first.cache_path.is_file() and first.cache_path.parent == tmp_path
    source = _Items(samples)
    second = PackedDataset(source, max_seq_len=16, pad_id=0, cache_dir=tmp_path, cache_key="data-v1")
    assert source.reads == 0  # loaded from disk: no sample was tokenized
    assert second.cache_path == first.cache_path
    for k in first.arrays:
        assert np.array_equal(first.arrays[k], second.arrays[k])
    # another key or another pack length is another file
    other = PackedDataset(_Items(samples), max_seq_len=8, pad_id=0, cache_dir=tmp_path, cache_key="data-v1")
    assert other.cache_path != first.cache_path and len(list(tmp_path.glob("packed-*.npz"))) == 2


def test_cache_without_key_hashes_content(tmp_path, monkeypatch):
    samples = [[1, 2, 3], [4, 5]]
    first = PackedDataset(_Items(samples), max_seq_len=8, pad_id=0, cache_dir=tmp_path)

    def fail(*args, **kwargs):
        raise AssertionError("should have been loaded from the cache")

    monkeypatch.setattr(packing, "pack_sequences", fail)
    second = PackedDataset(_Items(samples), max_seq_len=8, pad_id=0, cache_dir=tmp_path)
    assert second.cache_path == first.cache_path and second[0] == first[0]
    with pytest.raises(AssertionError, match="should have been loaded"):
        PackedDataset(_Items([[1, 2, 3], [4, 6]]), max_seq_len=8, pad_id=0, cache_dir=tmp_path)
