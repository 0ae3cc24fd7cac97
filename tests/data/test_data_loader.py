from functools import partial

import pytest
import torch

from ftune.data import build_dataloader, padded_collate_sft
from ftune.data.sampler import epoch_batches, epoch_permutation, shard_indices


class _Range:
    """Item i is {"tokens": [i] * (i % 3 + 1)}: batches are easy to read back as indices."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"tokens": [i] * (i % 3 + 1), "labels": [i] * (i % 3 + 1)}


def _ids(batch):
    return batch["tokens"][:, 0].tolist()


def _loader(n=23, **kwargs):
    kwargs.setdefault("batch_size", 4)
    return build_dataloader(_Range(n), collate_fn=partial(padded_collate_sft, pad_id=-1), **kwargs)


def _run(loader, num_batches):
    out = []
    while len(out) < num_batches:
        for batch in loader:
            out.append(_ids(batch))
            if len(out) == num_batches:
                break
    return out


def test_len_is_batches_per_epoch():
    assert len(_loader(23, batch_size=4)) == 5
    assert len(_loader(23, batch_size=4, drop_last=False)) == 6
    assert len(_loader(23, batch_size=4, world_size=2, rank=1)) == 2  # 11 per rank
    assert len(_loader(23, batch_size=4, world_size=2, drop_last=False)) == 3  # 12 per rank


def test_one_epoch_is_a_permutation_and_epochs_differ():
    loader = _loader(24, batch_size=4)
    e0 = [i for b in loader for i in _ids(b)]
    e1 = [i for b in loader for i in _ids(b)]
    assert sorted(e0) == sorted(e1) == list(range(24))
    assert e0 != e1 and loader.state_dict() == {"epoch": 2, "batches_consumed": 0, "seed": 0}


def test_same_seed_same_order_other_seed_other_order():
    assert _run(_loader(seed=3), 12) == _run(_loader(seed=3), 12)
    assert _run(_loader(seed=3), 5) != _run(_loader(seed=4), 5)
    assert _run(_loader(shuffle=False), 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]


@pytest.mark.parametrize("k", [0, 3, 4, 5, 7, 10])
def test_resume_yields_exactly_the_remaining_batches_across_epochs(k):
    total = 14  # 5 batches per epoch: crosses two epoch boundaries
    straight = _run(_loader(seed=7), total)
    first = _loader(seed=7)
    head = _run(first, k)
    state = first.state_dict()
    resumed = _loader(seed=7)
    resumed.load_state_dict(state)
    assert head + _run(resumed, total - k) == straight


def test_state_counts_batches_handed_out():
    loader = _loader()
    it = iter(loader)
    next(it), next(it)
    assert loader.state_dict() == {"epoch": 0, "batches_consumed": 2, "seed": 0}
    for _ in range(3):
        next(it)  # the epoch's last batch moves the position to the next epoch
    assert loader.state_dict() == {"epoch": 1, "batches_consumed": 0, "seed": 0}
    with pytest.raises(StopIteration):
        next(it)


def test_resume_with_workers_matches():
    straight = _run(_loader(num_workers=2), 7)
    first = _loader()
    _run(first, 3)
    resumed = _loader(num_workers=2)
    resumed.load_state_dict(first.state_dict())
    assert straight[3:] == _run(resumed, 4)


def test_load_state_dict_adopts_saved_seed_and_rejects_missing_keys():
    loader = _loader(seed=1)
    loader.load_state_dict({"epoch": 0, "batches_consumed": 0, "seed": 5})
    assert _run(loader, 3) == _run(_loader(seed=5), 3)
    with pytest.raises(
        KeyError, match=r"state is missing \['seed'\]; got keys \['batches_consumed', 'epoch'\]"
    ):
        loader.load_state_dict({"epoch": 0, "batches_consumed": 0})


def test_ranks_get_disjoint_shards_whose_union_is_the_big_batch():
    n, bs, ws = 40, 3, 2
    per_rank = [_run(_loader(n, batch_size=bs, rank=r, world_size=ws, seed=11), 6) for r in range(ws)]
    single = _run(_loader(n, batch_size=bs * ws, seed=11), 6)
    for i in range(6):
        a, b = per_rank[0][i], per_rank[1][i]
        assert not set(a) & set(b)
        assert sorted(a + b) == sorted(single[i])  # same samples as the single-device batch of bs * ws
    epoch0 = [
        i for r in range(ws) for b in per_rank[r][: len(_loader(n, batch_size=bs, world_size=ws))] for i in b
    ]
    assert len(epoch0) == len(set(epoch0))


def test_shard_pads_by_wrapping_without_drop_last():
    order = torch.arange(5).numpy()
    assert shard_indices(order, rank=0, world_size=2, drop_last=False).tolist() == [0, 2, 4]
    assert shard_indices(order, rank=1, world_size=2, drop_last=False).tolist() == [1, 3, 0]
    assert shard_indices(order, rank=1, world_size=2, drop_last=True).tolist() == [1, 3]


def test_permutation_depends_on_seed_and_epoch_pair():
    assert epoch_permutation(50, seed=0, epoch=1).tolist() != epoch_permutation(50, seed=1, epoch=0).tolist()
    assert epoch_batches(7, batch_size=3, seed=0, epoch=0, shuffle=False, drop_last=False) == [
        [0, 1, 2],
        [3, 4, 5],
        [6],
    ]


def test_errors_name_the_problem():
    with pytest.raises(
        ValueError, match=r"the dataset has 3 samples, which gives no batch of batch_size=4 per rank"
    ):
        _loader(3, batch_size=4)
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size\), got rank=2, world_size=2"):
        _loader(rank=2, world_size=2)
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        _loader(batch_size=0)
