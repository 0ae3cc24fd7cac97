"""One training step of a tiny Llama 3.2 Vision model under FSDP2 at world size 2 (gloo, CPU) equals
one device: full fine-tuning of every part, and LoRA in every part. The tiled encoder's layers (local
and global) and the decoder's layers (self- and cross-attention) are FSDP units of their own; rows
hold different numbers of images of different tile counts."""

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.fsdp import FSDPModule

from ftune.data.mllama_image import cross_attention_mask
from ftune.models.llama3_2_vision import llama3_2_vision_tiny
from ftune.modules.cross_attention_layer import CrossAttentionLayer
from ftune.peft import apply_lora
from ftune.training import shard_model

pytestmark = pytest.mark.distributed
WORLD, LR, IMAGE, VOCAB, TILES, LENGTH = 2, 0.5, 64, 64, 4, 20
COUNTS = [1, 2, 1, 1]  # images of each row; rank 0 takes rows 0-1 (3 images), rank 1 rows 2-3 (2)
RATIOS = [(1, 1), (1, 2), (2, 2), (2, 1), (1, 3)]  # tile rows x columns of each image, in order
RATIO_IDS = {(1, 1): 1, (1, 2): 2, (1, 3): 3, (2, 1): 5, (2, 2): 6}  # ids of 4-tile arrangements


def _half(rows: range, first_image: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """The inputs of `rows`: tokens with one image token an image, tiles, the cross-attention mask."""
    tokens = torch.randint(0, 60, (len(rows), LENGTH), generator=g)
    masks, n = [], first_image
    for i, row in enumerate(rows):
        tiles = []
        for j in range(COUNTS[row]):
            tokens[i, 2 + 6 * j] = IMAGE
            tiles.append(RATIOS[n][0] * RATIOS[n][1])
            n += 1
        masks.append(cross_attention_mask(tokens[i].tolist(), IMAGE, tiles, TILES))
    images = range(first_image, n)
    tile_mask = torch.zeros(len(images), TILES, dtype=torch.long)
    for k, image in enumerate(images):
        tile_mask[k, : RATIOS[image][0] * RATIOS[image][1]] = 1
    most = max(m.shape[1] for m in masks)
    cam = torch.zeros(len(rows), LENGTH, most, TILES, dtype=torch.long)
    for i, m in enumerate(masks):
        cam[i, :, : m.shape[1]] = m
    return {
        "tokens": tokens,
        "pixel_values": torch.rand(len(images), TILES, 3, 8, 8, generator=g) * 2 - 1,
        "aspect_ratio_ids": torch.tensor([RATIO_IDS[RATIOS[k]] for k in images]),
        "aspect_ratio_mask": tile_mask,
        "image_sample": torch.tensor([i for i, row in enumerate(rows) for _ in range(COUNTS[row])]),
        "cross_attention_mask": cam,
    }


def _halves() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [_half(range(0, 2), 0, g), _half(range(2, 4), sum(COUNTS[:2]), g)]


def _model(method: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = llama3_2_vision_tiny()
    with torch.no_grad():  # open the gates (zero in a fresh model): the cross-attention layers act
        for name, p in model.named_parameters():
            if name.endswith("_gate") or ".gate" in name:
                p.fill_(0.5)
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


def _loss(model: torch.nn.Module, half: dict[str, torch.Tensor], total: int) -> torch.Tensor:
    tokens = half["tokens"]
    logits = model(tokens, **{k: v for k, v in half.items() if k != "tokens"})
    labels = tokens[:, 1:].masked_fill(tokens[:, 1:] == IMAGE, -100)  # the image token is never a target
    return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels.reshape(-1), reduction="sum") / total


def _step(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p -= LR * p.grad


def _one_device(method: str) -> dict[str, torch.Tensor]:
    model = _model(method)
    for half in _halves():  # the halves the ranks see, gradients accumulated
        _loss(model, half, 4 * (LENGTH - 1)).backward()
    _step(model)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _rank(rank: int, method: str, init_file: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        model = shard_model(_model(method))
        assert all(isinstance(layer, FSDPModule) for layer in model.vision_encoder.layers)
        assert all(isinstance(layer, FSDPModule) for layer in model.decoder.layers)
        assert any(isinstance(layer, CrossAttentionLayer) for layer in model.decoder.layers)
        # FSDP2 averages gradients over ranks: scale by the world size so that they sum.
        (_loss(model, _halves()[rank], 4 * (LENGTH - 1)) * WORLD).backward()
        _step(model)
        state = {k: v.full_tensor() for k, v in model.state_dict().items()}
        if rank == 0:
            torch.save(state, out)
        dist.barrier()  # no rank tears its group down while another still talks to it (gloo aborts)
    finally:
        dist.destroy_process_group()


# LoRA under -m slow: the default suite's time goes to the full step (every part trains).
@pytest.mark.parametrize("method", ["full", pytest.param("lora", marks=pytest.mark.slow)])
def test_world_size_2_step_equals_one_device(tmp_path: Path, method: str) -> None:
    out = tmp_path / "state.pt"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    mp.spawn(_rank, args=(method, str(tmp_path / "init"), str(out)), nprocs=WORLD, join=True)
    sharded = torch.load(out, weights_only=True)
    expected = _one_device(method)
    start = _model(method).state_dict()
    trained = {n for n, p in _model(method).named_parameters() if p.requires_grad}
    assert sharded.keys() == expected.keys()
    moved = {k for k in trained if (expected[k] - start[k]).abs().max() > 0}
    # Every part trains, the cross-attention layers and the global encoder layers included.
    assert any(".cross_attn." in k for k in moved) and any("global_transformer" in k for k in moved)
    assert {k.split(".")[0] for k in moved} == {"vision_encoder", "projector", "decoder"}
    for key, value in expected.items():
        want, got = value - start[key], sharded[key] - start[key]
        if key not in trained:
            assert want.abs().max() == 0 and got.abs().max() == 0, key  # frozen stays frozen
            continue
        # 1e-5 of the update, or 1e-7: fp32 rounding of weights near 0.1 when the update is tiny
        assert (got - want).abs().max() <= max(1e-5 * want.abs().max(), 1e-7), key
