"""Activation offloading: refused on CPU (nothing to offload to); on CUDA, saved activations leave the GPU.

The CUDA tests run only on a GPU machine (the CI machines have none): the registry declares the
feature GPU-only for that reason.
"""

import copy

import pytest
import torch

from ftune.training import apply_activation_checkpointing, apply_activation_offloading
from ftune.training.features.activation_offloading import offloadable
from ftune.training.step.loss import ChunkedCrossEntropyLoss
from ftune.training.step.token_loss import batch_loss

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="activation offloading needs a CUDA device")


def test_refused_on_cpu_with_the_reason_and_the_fix(tiny_model):
    model = tiny_model()
    with pytest.raises(
        ValueError, match=r"device is 'cpu'.*nothing to offload to\. Set activation_offloading=false"
    ):
        apply_activation_offloading(model, torch.device("cpu"))
    assert "forward" not in model.layers[0].__dict__  # nothing was changed


def test_cpu_tensors_and_small_or_parameter_tensors_are_never_offloaded():
    big = torch.zeros(1 << 20)
    assert not offloadable(big, set(), min_bytes=1)  # already in CPU memory
    meta = torch.empty(1 << 20, device="meta")
    assert not offloadable(meta, set(), min_bytes=1)


def _loss_and_grads(model, batch, device):
    torch.manual_seed(0)
    loss, _ = batch_loss(model, ChunkedCrossEntropyLoss(2), batch, device=device)
    loss.backward()
    return loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


@cuda
@pytest.mark.parametrize("checkpointed", [False, True])
def test_same_grads_and_less_gpu_memory_between_forward_and_backward(tiny_model, batch_factory, checkpointed):
    device = torch.device("cuda")
    batch = batch_factory([[i % 50 for i in range(512)]] * 4, [[i % 50 for i in range(512)]] * 4)
    model = tiny_model(dim=256, max_seq_len=512).to(device)
    offloaded = copy.deepcopy(model)
    if checkpointed:
        apply_activation_checkpointing(model)
        apply_activation_checkpointing(offloaded)
    assert apply_activation_offloading(offloaded, device, min_bytes=1024) == len(offloaded.layers)

    def held_after_forward(m):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        loss, _ = batch_loss(m, ChunkedCrossEntropyLoss(2), batch, device=device)
        torch.cuda.synchronize()
        return torch.cuda.memory_allocated() - before, loss

    plain_bytes, plain_loss = held_after_forward(model)
    off_bytes, off_loss = held_after_forward(offloaded)
    assert off_bytes < plain_bytes
    plain_loss.backward()
    off_loss.backward()
    for (name, p), q in zip(model.named_parameters(), offloaded.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=name)
