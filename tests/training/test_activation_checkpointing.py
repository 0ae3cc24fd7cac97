import copy

import pytest
import torch
from torch import nn

from ftune.training.features.activation_checkpointing import apply_activation_checkpointing
from ftune.training.step.loss import ChunkedCrossEntropyLoss
from ftune.training.step.token_loss import batch_loss

CPU = torch.device("cpu")


def _loss_and_grads(model, batch):
    torch.manual_seed(123)  # same dropout masks in both runs
    loss_sum, _ = batch_loss(model, ChunkedCrossEntropyLoss(2), batch, device=CPU)
    loss_sum.backward()
    return loss_sum.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


def test_same_loss_grads_names_and_keys(tiny_model, batch_factory):
    batch = batch_factory(
        [[1, 5, 9, 3, 7, 2], [4, 4, 8, 1, 0, 6]], [[1, 5, 9, 3, 7, 2], [-100, -100, 8, 1, 0, 6]]
    )
    model = tiny_model(dropout=0.1)
    checkpointed = copy.deepcopy(model)
    assert apply_activation_checkpointing(checkpointed) == 2

    assert list(checkpointed.state_dict()) == list(model.state_dict())
    assert [n for n, _ in checkpointed.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert all(type(a) is type(b) for a, b in zip(checkpointed.modules(), model.modules()))

    loss, grads = _loss_and_grads(model, batch)
    loss_ckpt, grads_ckpt = _loss_and_grads(checkpointed, batch)
    assert torch.equal(loss, loss_ckpt)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=0, atol=0)


def test_layers_are_recomputed_in_backward(tiny_model, batch_factory):
    batch = batch_factory([[1, 2, 3, 4]], [[1, 2, 3, 4]])
    model = tiny_model()
    apply_activation_checkpointing(model)
    calls = []
    model.layers[0].qkv.register_forward_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    loss_sum, _ = batch_loss(model, ChunkedCrossEntropyLoss(), batch, device=CPU)
    assert len(calls) == 1
    loss_sum.backward()
    assert len(calls) == 2  # the layer ran again during backward


def test_idempotent_and_deepcopy_safe(tiny_model, batch_factory):
    model = tiny_model()
    apply_activation_checkpointing(model)
    assert apply_activation_checkpointing(model) == 0
    clone = copy.deepcopy(model)
    assert clone.layers[0].forward.__self__ is clone.layers[0]  # bound to the copy, not the original
    with torch.no_grad():
        for p in clone.parameters():
            p.zero_()
    batch = batch_factory([[1, 2, 3]], [[1, 2, 3]])
    # A zeroed copy predicts uniformly (loss log(vocab) per token): it runs its own weights.
    loss_sum, n = batch_loss(clone, ChunkedCrossEntropyLoss(), batch, device=CPU)
    assert loss_sum.item() / n == pytest.approx(torch.log(torch.tensor(64.0)).item(), rel=1e-5)


def test_model_without_layers_is_rejected():
    with pytest.raises(
        ValueError, match=r"needs a model with a `layers` nn.ModuleList .*Linear.layers is NoneType"
    ):
        apply_activation_checkpointing(nn.Linear(2, 2))
