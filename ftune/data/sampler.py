"""Deterministic, rank-aware index order: which samples go into which batch, epoch by epoch.

The order of an epoch is a pure function of (dataset size, seed, epoch, rank, world_size,
batch_size, drop_last): nothing is drawn from global RNG state, so a run that resumes at
(epoch, batch) sees exactly the batches the uninterrupted run would have seen.

Sharding follows `torch.utils.data.DistributedSampler`: the epoch's permutation is made
divisible by world_size (truncated when drop_last, else wrapped around), and rank r takes
every world_size-th index starting at r. Rank r's batch i then holds permutation positions
(i * batch_size + j) * world_size + r for j < batch_size, so the union over ranks of batch i
is exactly positions [i * B, (i + 1) * B) with B = batch_size * world_size: the same samples
as batch i of a single-device run with batch size B and the same seed (in another row order).
With drop_last=False the last, partial batch differs because of the wrap-around padding.
"""

from __future__ import annotations

import numpy as np


def epoch_permutation(num_samples: int, *, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The order of all sample indices in one epoch.

    Args:
        num_samples: dataset size.
        seed: run seed.
        epoch: epoch number; each epoch gets its own order, seeded by (seed, epoch).
        shuffle: when False, the order is 0 .. num_samples-1 in every epoch.

    Returns:
        int64 array of the indices [num_samples].
    """
    if not shuffle:
        return np.arange(num_samples, dtype=np.int64)
    # SeedSequence over the pair: (seed=0, epoch=1) and (seed=1, epoch=0) give unrelated orders
    return np.random.default_rng([seed, epoch]).permutation(num_samples).astype(np.int64)


def shard_indices(indices: np.ndarray, *, rank: int, world_size: int, drop_last: bool) -> np.ndarray:
    """This rank's share of an epoch's indices, equal in length on every rank.

    Args:
        indices: the epoch's order of all indices.
        rank: this process's rank in [0, world_size).
        world_size: number of data-parallel processes.
        drop_last: truncate to a multiple of world_size (True) or wrap around to pad (False).

    Returns:
        The indices for `rank`.

    Raises:
        ValueError: `rank` is not in [0, world_size).
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(
            f"shard_indices: rank must be in [0, world_size), got rank={rank}, world_size={world_size}."
        )
    n = len(indices)
    if drop_last:
        indices = indices[: n - n % world_size]
    elif n % world_size and n:
        pad = world_size - n % world_size
        indices = np.concatenate([indices, np.resize(indices, pad)])
    return indices[rank::world_size]


def epoch_batches(
    num_samples: int,
    *,
    batch_size: int,
    seed: int,
    epoch: int,
    shuffle: bool = True,
    drop_last: bool = True,
    rank: int = 0,
    world_size: int = 1,
) -> list[list[int]]:
    """The index batches this rank sees in one epoch, in order.

    Args:
        num_samples: dataset size.
        batch_size: samples per batch on this rank.
        seed: run seed.
        epoch: epoch number.
        shuffle: shuffle with a per-epoch order seeded by (seed, epoch).
        drop_last: drop the last incomplete batch (and truncate, rather than pad, the shard).
        rank: this process's rank.
        world_size: number of data-parallel processes.

    Returns:
        A list of batches, each a list of dataset indices.

    Raises:
        ValueError: `batch_size` is not positive, or the rank is out of range.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size}.")
    order = epoch_permutation(num_samples, seed=seed, epoch=epoch, shuffle=shuffle)
    shard = shard_indices(order, rank=rank, world_size=world_size, drop_last=drop_last)
    n_batches = len(shard) // batch_size if drop_last else -(-len(shard) // batch_size)
    return [shard[i * batch_size : (i + 1) * batch_size].tolist() for i in range(n_batches)]


def batches_per_epoch(
    num_samples: int, *, batch_size: int, drop_last: bool = True, world_size: int = 1
) -> int:
    """Number of batches each rank sees per epoch (the same on every rank)."""
    per_rank = num_samples // world_size if drop_last else -(-num_samples // world_size)
    return per_rank // batch_size if drop_last else -(-per_rank // batch_size)
