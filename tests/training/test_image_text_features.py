"""The step's per-layer features on an image-text model: activation checkpointing wraps the vision
encoder's layers and the decoder's, and leaves the gradients as they were."""

import copy

import torch

from ftune.models.smolvlm import smolvlm_tiny
from ftune.training import apply_activation_checkpointing
from ftune.training.features.layers import block_layers


def _grads(model: torch.nn.Module, tokens: torch.Tensor, images: torch.Tensor) -> dict[str, torch.Tensor]:
    model(tokens, images).logsumexp(-1).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_activation_checkpointing_covers_encoder_and_decoder_layers() -> None:
    torch.manual_seed(0)
    model = smolvlm_tiny()
    plain = copy.deepcopy(model)
    layers = block_layers(model, feature="test")
    assert layers == [*model.vision_encoder.layers, *model.decoder.layers]
    assert apply_activation_checkpointing(model) == 4
    assert all("forward" in layer.__dict__ for layer in layers)
    tokens = torch.randint(0, 60, (2, 12), generator=torch.Generator().manual_seed(1))
    tokens[0, 2:6] = tokens[1, 1:5] = tokens[1, 7:11] = 63  # one image, then two
    images = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    want, got = _grads(plain, tokens, images), _grads(model, tokens, images)
    assert want.keys() == got.keys() and any(k.startswith("vision_encoder.layers.") for k in got)
    assert all(torch.allclose(got[k], want[k], rtol=0, atol=1e-6) for k in want)
