"""Mutants of tensor and context parallel for tests/training/parallel_driver.py: each must change the
losses or the weights (or fail), or the equality check would not see that fault."""

import contextlib
from unittest import mock

from torch.distributed.tensor import Partial

from ftune.modules import context_exchange
from ftune.training.features import tensor_parallel

TP_MUTANTS = ("rowwise_q", "unreduced_o")
CP_MUTANTS = ("no_exchange", "local_positions")
_real_gather = context_exchange.gather_sequence
_real_slice = context_exchange.ContextSplit.slice


def _own_keys_only(x, group, dim):
    """The exchange of keys, values and their positions skipped; the final gather kept."""
    return _real_gather(x, group, dim) if x.dim() == 3 else x


def _local_positions(self, tokens, input_pos, mask):
    tokens, pos, mask = _real_slice(self, tokens, input_pos, mask)
    return tokens, pos - pos[:, :1], mask  # each slice numbered from 0


def _unreduced_rowwise():
    return tensor_parallel.RowwiseParallel(output_layouts=Partial())  # partial sums never all-reduced


def mutant_patch(name: str) -> contextlib.AbstractContextManager:
    """The patch that makes mutant `name` ("" for none) while it is entered."""
    if not name:
        return contextlib.nullcontext()
    if name == "rowwise_q":  # a wrong shard: q_proj split by its input features, not by heads
        return mock.patch.dict(tensor_parallel.ATTENTION_PLAN, {"q_proj": "rowwise"})
    if name == "unreduced_o":
        return mock.patch.dict(tensor_parallel._STYLES, {"rowwise": _unreduced_rowwise})
    if name == "no_exchange":
        return mock.patch.object(context_exchange, "gather_sequence", _own_keys_only)
    if name == "local_positions":
        return mock.patch.object(context_exchange.ContextSplit, "slice", _local_positions)
    raise ValueError(f"unknown mutant {name!r}; known: {TP_MUTANTS + CP_MUTANTS}")
