"""A tiny Qwen3-MoE trained one step with FSDP2 at world size 2 (gloo, CPU) equals one device.

Each rank holds half of every stacked expert tensor (FSDP2 shards dim 0: the experts) and half of
the global batch. The cross-entropy is normalised by the global token count, as the recipes do
(`ftune.training.features.fsdp`), and the load-balancing loss is each rank's own over its tokens,
averaged over ranks, as transformers and the MoE trainers compute it: the one-device reference
computes exactly that (a nonlinear function of the batch does not split into halves otherwise).
"""

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from ftune.models.qwen3_moe import qwen3_moe_tiny
from ftune.training import shard_model

pytestmark = pytest.mark.distributed
WORLD, LR, COEF = 2, 0.5, 0.1


def _batch() -> torch.Tensor:
    return torch.randint(0, 128, (4, 24), generator=torch.Generator().manual_seed(0))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return qwen3_moe_tiny()


def _loss(model: torch.nn.Module, tokens: torch.Tensor, total_tokens: int) -> torch.Tensor:
    logits = model(tokens)
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, 128), tokens[:, 1:].reshape(-1), reduction="sum")
    return ce / total_tokens + COEF * model.aux_loss() / WORLD


def _one_device() -> dict[str, torch.Tensor]:
    model = _model()
    tokens = _batch()
    total = tokens.shape[0] * (tokens.shape[1] - 1)
    for half in tokens.chunk(WORLD):  # the same two halves the ranks see, gradients accumulated
        _loss(model, half, total).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
    return {k: v.clone() for k, v in model.state_dict().items()}


def _rank(rank: int, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        model = shard_model(_model())
        experts = model.layers[0].mlp.experts.gate_up_proj
        assert experts.to_local().shape[0] == 8 // WORLD  # each rank holds half the experts
        tokens = _batch()
        total = tokens.shape[0] * (tokens.shape[1] - 1)
        # FSDP2 averages gradients over ranks: scale by the world size so that they sum.
        (_loss(model, tokens.chunk(WORLD)[rank], total) * WORLD).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= LR * p.grad
        state = {k: v.full_tensor() for k, v in model.state_dict().items()}
        if rank == 0:
            torch.save(state, out)
        dist.barrier()  # no rank tears its group down while another still talks to it (gloo aborts)
    finally:
        dist.destroy_process_group()


def test_world_size_2_step_equals_one_device(tmp_path: Path) -> None:
    out = tmp_path / "state.pt"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    mp.spawn(_rank, args=(str(tmp_path / "init"), str(out)), nprocs=WORLD, join=True)
    sharded = torch.load(out, weights_only=True)
    expected = _one_device()
    start = _model().state_dict()
    assert sharded.keys() == expected.keys()
    for key, value in expected.items():
        # The updates, not the weights: a step's change is small next to the weights themselves.
        want, got = value - start[key], sharded[key] - start[key]
        assert want.abs().max() > 0, key  # every parameter trains (the router through the aux loss)
        assert (got - want).abs().max() <= 1e-5 * want.abs().max(), key  # measured: within 1e-6
