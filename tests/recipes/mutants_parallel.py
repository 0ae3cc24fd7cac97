"""The mutants of tensor and context parallel (tests/recipes/mutants.py's pattern): each makes the
checks of tests/recipes/features_parallel.py fail at world size 2 without breaking the run (a wrong
shard that breaks it, q_proj row-wise, is tests/training/test_parallel_mesh.py's)."""

from __future__ import annotations

from typing import Any

from torch.distributed.tensor import Partial

from ftune.modules import context_exchange
from ftune.training.features import fsdp, tensor_parallel

_real_gather = context_exchange.gather_sequence
_real_slice = context_exchange.ContextSplit.slice


def _own_keys_only(x, group, dim):
    """Keys, values and their positions not exchanged (each slice attends to itself); the final gather kept."""
    return _real_gather(x, group, dim) if x.dim() == 3 else x


def _local_positions(self, tokens, input_pos, mask):
    tokens, pos, mask = _real_slice(self, tokens, input_pos, mask)
    return tokens, pos - pos[:, :1], mask  # each slice numbered from 0: RoPE and the mask at local positions


def parallel_mutants(mutant: Any, wrap: Any) -> dict[str, tuple[Any, ...]]:
    """feature -> its mutants, built with mutants.py's `Mutant` and `_wrap`."""

    def unreduced_o(mp):
        unreduced = lambda: tensor_parallel.RowwiseParallel(output_layouts=Partial())  # noqa: E731
        mp.setitem(tensor_parallel._STYLES, "rowwise", unreduced)

    return {
        "tensor_parallel": (
            mutant(
                "tensor_parallel_noop", "fsdp.tensor_parallel", wrap(fsdp, "tensor_parallel", _keep_model)
            ),
            mutant("unreduced_o", "tensor_parallel._STYLES['rowwise']", unreduced_o),
        ),
        "context_parallel": (
            mutant(
                "context_parallel_noop", "fsdp.context_parallel", wrap(fsdp, "context_parallel", _keep_model)
            ),
            mutant(
                "no_exchange",
                "context_exchange.gather_sequence",
                lambda mp: mp.setattr(context_exchange, "gather_sequence", _own_keys_only),
            ),
            mutant(
                "local_positions",
                "ContextSplit.slice",
                lambda mp: mp.setattr(context_exchange.ContextSplit, "slice", _local_positions),
            ),
        ),
    }


def _keep_model(real):
    return lambda model, *a, **k: model
