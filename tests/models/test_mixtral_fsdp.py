"""One training step of a tiny Mixtral under FSDP2 at world size 2 (gloo, CPU) equals one device:
full fine-tuning, and LoRA on attention and on the stacked experts.

FSDP2 shards dim 0 of every parameter, so each rank holds 4 of the 8 experts of each stacked expert
tensor (and of each expert adapter). Each rank takes half the global batch; the cross-entropy is
normalised by the global token count, and the load-balancing loss is each rank's own over its
tokens, averaged over ranks (the one-device reference computes the same: the loss is not linear in
the batch, so the halves are accumulated rather than the batch taken whole).
"""

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from ftune.models.mixtral import mixtral_tiny
from ftune.peft import apply_lora
from ftune.training import shard_model

pytestmark = pytest.mark.distributed
WORLD, LR, COEF = 2, 0.5, 0.1


def _batch() -> torch.Tensor:
    return torch.randint(0, 128, (4, 24), generator=torch.Generator().manual_seed(0))


def _model(method: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = mixtral_tiny()
    if method == "lora":
        apply_lora(model, targets=["q_proj", "v_proj", "experts"], rank=4, alpha=8.0)
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".lora_b." in name:  # nonzero B: A gets a gradient too
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


def _loss(model: torch.nn.Module, tokens: torch.Tensor, total_tokens: int) -> torch.Tensor:
    logits = model(tokens)
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, 128), tokens[:, 1:].reshape(-1), reduction="sum")
    return ce / total_tokens + COEF * model.aux_loss() / WORLD


def _step(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p -= LR * p.grad


def _one_device(method: str) -> dict[str, torch.Tensor]:
    model = _model(method)
    tokens = _batch()
    total = tokens.shape[0] * (tokens.shape[1] - 1)
    for half in tokens.chunk(WORLD):  # the halves the ranks see, gradients accumulated
        _loss(model, half, total).backward()
    _step(model)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _rank(rank: int, method: str, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        model = shard_model(_model(method))
        experts = model.layers[0].mlp.experts
        assert experts.gate_up_proj.to_local().shape[0] == 8 // WORLD  # half the experts a rank
        if method == "lora":
            assert experts.lora.down_proj.lora_a.weight.to_local().shape[0] == 8 // WORLD
        tokens = _batch()
        total = tokens.shape[0] * (tokens.shape[1] - 1)
        # FSDP2 averages gradients over ranks: scale by the world size so that they sum.
        (_loss(model, tokens.chunk(WORLD)[rank], total) * WORLD).backward()
        _step(model)
        state = {k: v.full_tensor() for k, v in model.state_dict().items()}
        if rank == 0:
            torch.save(state, out)
        dist.barrier()  # no rank tears its group down while another still talks to it (gloo aborts)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("method", ["full", "lora"])
def test_world_size_2_step_equals_one_device(tmp_path: Path, method: str) -> None:
    out = tmp_path / "state.pt"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    mp.spawn(_rank, args=(method, str(tmp_path / "init"), str(out)), nprocs=WORLD, join=True)
    sharded = torch.load(out, weights_only=True)
    expected = _one_device(method)
    start = _model(method).state_dict()
    trained = {n for n, p in _model(method).named_parameters() if p.requires_grad}
    assert sharded.keys() == expected.keys()
    for key, value in expected.items():
        # Compare the updates, not the weights: a step's change is small next to the weights.
        want, got = value - start[key], sharded[key] - start[key]
        if key not in trained:
            assert want.abs().max() == 0 and got.abs().max() == 0, key  # frozen stays frozen
            continue
        assert want.abs().max() > 0, key  # every trained tensor moves (the router via the aux loss)
        assert (got - want).abs().max() <= 1e-5 * want.abs().max(), key  # measured: 0 (bit-equal) both
