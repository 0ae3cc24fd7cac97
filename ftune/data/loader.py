"""A stateful, deterministic data loader whose position can be saved and restored exactly.

    loader = build_dataloader(ds, batch_size=4, collate_fn=partial(padded_collate_sft, pad_id=0), seed=0)
    for batch in loader:          # the rest of the current epoch
        ...
        state = loader.state_dict()   # {"epoch", "batches_consumed", "seed"}

    loader = build_dataloader(ds, batch_size=4, collate_fn=..., seed=0)
    loader.load_state_dict(state)     # a fresh loader continues with the very next batch

One `iter(loader)` yields the remaining batches of the current epoch; the epoch counter
moves on as the last batch of an epoch is handed out, so `for epoch in ...: for batch in
loader:` walks the epochs, and a state saved right after an epoch's last batch resumes at
the start of the next epoch. Which samples form which batch is a pure function of
(seed, epoch, rank, world_size, batch_size): see `ftune.data.sampler`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from ftune.data.sampler import batches_per_epoch, epoch_batches

log = logging.getLogger(__name__)

STATE_KEYS = ("epoch", "batches_consumed", "seed")


class StatefulDataLoader:
    """Deterministic batches with a resumable position; see `build_dataloader` for the arguments."""

    def __init__(
        self,
        dataset: Sequence[Any],
        *,
        batch_size: int,
        collate_fn: Callable[[list[Any]], Any],
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        rank: int = 0,
        world_size: int = 1,
        num_workers: int = 0,
    ) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.collate_fn = collate_fn
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.rank = rank
        self.world_size = world_size
        self.num_workers = num_workers
        self.epoch = 0
        self.batches_consumed = 0
        if batch_size < 1:
            raise ValueError(f"build_dataloader: batch_size must be a positive int, got {batch_size}.")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"build_dataloader: rank must be in [0, world_size), got rank={rank}, world_size={world_size}."
            )
        if len(self) == 0:
            raise ValueError(
                f"build_dataloader: the dataset has {len(dataset)} samples, which gives no batch of "
                f"batch_size={batch_size} per rank with world_size={world_size} and drop_last={drop_last}. "
                "Use more data, a smaller batch_size, or drop_last=False."
            )

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return batches_per_epoch(
            len(self.dataset),
            batch_size=self.batch_size,
            drop_last=self.drop_last,
            world_size=self.world_size,
        )

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        return epoch_batches(
            len(self.dataset),
            batch_size=self.batch_size,
            seed=self.seed,
            epoch=epoch,
            shuffle=self.shuffle,
            drop_last=self.drop_last,
            rank=self.rank,
            world_size=self.world_size,
        )

    def __iter__(self) -> Iterator[Any]:
        n = len(self)
        if self.batches_consumed >= n:  # a state saved by an older loader at an epoch's very end
            self.epoch, self.batches_consumed = self.epoch + 1, 0
        remaining = self._epoch_batches(self.epoch)[self.batches_consumed :]
        # torch's DataLoader only runs the workers here; the order comes from our batch list. Its
        # iterator draws the workers' base seed from `generator`: our own, seeded by (seed, epoch),
        # never the global RNG, so that starting an iterator (as a resumed run does mid-epoch)
        # leaves the global RNG (dropout) exactly where the restored state put it.
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_sampler=remaining,
            collate_fn=self.collate_fn,
            num_workers=self.num_workers,
            generator=generator,
        )
        for batch in loader:
            # count before handing the batch out: state_dict() taken after receiving it includes it
            self.batches_consumed += 1
            if self.batches_consumed == n:
                self.epoch, self.batches_consumed = self.epoch + 1, 0
            yield batch

    def state_dict(self) -> dict[str, int]:
        """The position: {"epoch", "batches_consumed" (in that epoch), "seed"}."""
        return {"epoch": self.epoch, "batches_consumed": self.batches_consumed, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore a position saved by `state_dict`; the next batch is the one that would have come next.

        Raises:
            KeyError: `state` lacks one of "epoch", "batches_consumed", "seed".
        """
        missing = [k for k in STATE_KEYS if k not in state]
        if missing:
            raise KeyError(
                f"StatefulDataLoader.load_state_dict: state is missing {missing}; got keys {sorted(state)}, "
                f"expected {list(STATE_KEYS)} (as written by StatefulDataLoader.state_dict())."
            )
        if int(state["seed"]) != self.seed:
            log.warning(
                "dataloader resume: the saved seed %s replaces the configured seed %s, so that the batch "
                "order continues exactly",
                state["seed"],
                self.seed,
            )
        self.epoch = int(state["epoch"])
        self.batches_consumed = int(state["batches_consumed"])
        self.seed = int(state["seed"])


_PROBE = 32  # samples read at start-up: cheap (tokenizing a few rows), and enough to tell "all over-long"


def check_some_labels(dataset: Sequence[Any], ignore_index: int = -100) -> None:
    """Raise when none of the first samples has a labelled token (nothing to learn from).

    Typically every prompt is longer than max_seq_len, so truncation cut off every response and
    the run would train for its whole length on zero loss. Items without "labels" are not checked.

    Raises:
        ValueError: naming the number of samples read, the longest one and the fix.
    """
    n = min(len(dataset), _PROBE)
    items = [dataset[i] for i in range(n)]
    if not items or not all(isinstance(it, dict) and "labels" in it for it in items):
        return
    if any(label != ignore_index for it in items for label in it["labels"]):
        return
    longest = max(len(it["tokens"]) for it in items if "tokens" in it) if "tokens" in items[0] else "?"
    raise ValueError(
        f"the first {n} training samples have no labelled token: every response was cut off or masked "
        f"(samples are {longest} tokens at most after truncation). The prompts are longer than "
        "max_seq_len: raise tokenizer.max_seq_len (or the dataset's max_seq_len), shorten the prompts, "
        "or check train_on_input / the column_map."
    )


def build_dataloader(
    dataset: Sequence[Any],
    *,
    batch_size: int,
    collate_fn: Callable[[list[Any]], Any],
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = True,
    rank: int = 0,
    world_size: int = 1,
    num_workers: int = 0,
) -> StatefulDataLoader:
    """Build a stateful, deterministic data loader.

    Args:
        dataset: a map-style dataset (`len` and integer indexing).
        batch_size: samples per batch on this rank.
        collate_fn: list of items -> batch, e.g. `partial(padded_collate_sft, pad_id=tok.pad_id)`.
        shuffle: shuffle each epoch with an order seeded by (seed, epoch).
        seed: the run seed.
        drop_last: drop the last incomplete batch of an epoch.
        rank: this process's data-parallel rank.
        world_size: number of data-parallel processes; ranks get disjoint shards, and the union of
            all ranks' batch i is the single-device batch i of batch size batch_size * world_size.
        num_workers: worker processes computing items and batches (0: in this process).

    Returns:
        A `StatefulDataLoader`: iterate it for the rest of the current epoch; `len()` is batches per
        epoch; `state_dict()` / `load_state_dict()` save and restore the position.

    Raises:
        ValueError: bad batch_size or rank, a dataset too small for a single batch, or one whose
            first samples have no labelled token at all (see `check_some_labels`).
    """
    check_some_labels(dataset)
    return StatefulDataLoader(
        dataset,
        batch_size=batch_size,
        collate_fn=collate_fn,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        rank=rank,
        world_size=world_size,
        num_workers=num_workers,
    )


def validation_loader(dataset: Any, *, batch_size: int, collate_fn: Any) -> Any:
    """A plain, unshuffled loader for validation: every evaluation reads the same first batches.

    It has a generator of its own: each ``iter()`` of a torch DataLoader draws a seed from its
    generator, and without one from the global RNG, so a validation pass would shift the dropout
    draws of every later training step (a run with validation would then train differently).
    """
    if dataset is None:
        return None
    return torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_fn, generator=torch.Generator()
    )
