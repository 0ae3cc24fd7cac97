"""One training step of a tiny image-text model (SmolVLM) under FSDP2 at world size 2 (gloo, CPU)
equals one device: full fine-tuning of every part, and LoRA in every part. The vision encoder's
layers are FSDP units of their own, like the decoder's; rows hold different numbers of images."""

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.fsdp import FSDPModule

from ftune.models.smolvlm import smolvlm_tiny
from ftune.peft import apply_lora
from ftune.training import shard_model

pytestmark = pytest.mark.distributed
WORLD, LR, IMAGE, VOCAB = 2, 0.5, 63, 64
COUNTS = [1, 2, 1, 1]  # images of each row; rank 0 takes rows 0-1 (3 images), rank 1 rows 2-3 (2)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    """(4, 24) tokens with 4 image tokens an image, and the (5, 3, 16, 16) images in row order."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 60, (4, 24), generator=g)
    for row, n in enumerate(COUNTS):
        for i in range(n):
            tokens[row, 2 + 8 * i : 6 + 8 * i] = IMAGE
    return tokens, torch.rand(sum(COUNTS), 3, 16, 16, generator=g) * 2 - 1


def _model(method: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = smolvlm_tiny()
    if method == "lora":
        targets = {
            "decoder": ["q_proj", "v_proj"],
            "projector": ["proj"],
            "vision_encoder": ["q_proj", "fc1"],
        }
        apply_lora(model, targets=targets, rank=2, alpha=4.0)
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".lora_b." in name:  # nonzero B: A gets a gradient too
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


def _loss(model: torch.nn.Module, tokens: torch.Tensor, images: torch.Tensor, total: int) -> torch.Tensor:
    logits = model(tokens, images)
    return (
        F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), tokens[:, 1:].reshape(-1), reduction="sum") / total
    )


def _halves() -> list[tuple[torch.Tensor, torch.Tensor]]:
    tokens, images = _batch()
    split = sum(COUNTS[:2])
    return [(tokens[:2], images[:split]), (tokens[2:], images[split:])]


def _step(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p -= LR * p.grad


def _one_device(method: str) -> dict[str, torch.Tensor]:
    model = _model(method)
    total = 4 * 23
    for tokens, images in _halves():  # the halves the ranks see, gradients accumulated
        _loss(model, tokens, images, total).backward()
    _step(model)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _rank(rank: int, method: str, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        model = shard_model(_model(method))
        assert isinstance(model.vision_encoder.layers[0], FSDPModule)
        assert isinstance(model.decoder.layers[0], FSDPModule)
        tokens, images = _halves()[rank]
        # FSDP2 averages gradients over ranks: scale by the world size so that they sum.
        (_loss(model, tokens, images, 4 * 23) * WORLD).backward()
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
    assert {k.split(".")[0] for k in trained} == {"vision_encoder", "projector", "decoder"}
    for key, value in expected.items():
        want, got = value - start[key], sharded[key] - start[key]
        if key not in trained:
            assert want.abs().max() == 0 and got.abs().max() == 0, key  # frozen stays frozen
            continue
        # Every trained tensor moves, the vision encoder's too; a key bias cannot (softmax ignores
        # a shift of every score of a query by the same amount).
        assert want.abs().max() > 0 or key.endswith("k_proj.bias"), key
        assert (got - want).abs().max() <= 1e-5 * want.abs().max(), key
