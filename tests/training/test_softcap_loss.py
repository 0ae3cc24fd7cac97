"""Soft-capped logits (Gemma 2) in the training losses: value and gradients of the plain and the
chunked cross-entropy (whose fused backward carries tanh's derivative) equal autograd through
``softcap(hidden @ W.T)`` then cross-entropy, in fp32; and token_loss reads the cap from the model."""

import pytest
import torch
import torch.nn.functional as F

from ftune.models.gemma2 import gemma2
from ftune.modules.transformer import OutputHead
from ftune.training import ChunkedCrossEntropyLoss, CrossEntropyLoss, on_device
from ftune.training.step.token_loss import token_loss

CAP = 3.0
VOCAB, DIM = 96, 32


def _inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    # Large logits (|z| up to ~15 >> CAP): tanh saturates, so its derivative matters.
    weight = (torch.randn(VOCAB, DIM, generator=gen) * 0.6).requires_grad_()
    hidden = torch.randn(2, 12, DIM, generator=gen).requires_grad_()
    labels = torch.randint(0, VOCAB, (2, 12), generator=gen)
    labels[0, :4] = -100
    return weight, hidden, labels


def _reference(weight, hidden, labels, cap):
    logits = (hidden @ weight.T).float()
    if cap is not None:
        logits = cap * torch.tanh(logits / cap)
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100, reduction="sum")


def _loss_and_grads(fn, *inputs):
    weight, hidden, labels = inputs
    loss = fn(weight, hidden, labels)
    gw, gh = torch.autograd.grad(loss, (weight, hidden))
    return loss.detach(), gw, gh


@pytest.mark.parametrize("loss_fn", [CrossEntropyLoss(), ChunkedCrossEntropyLoss(num_chunks=3)])
def test_capped_loss_and_gradients_equal_autograd_reference(loss_fn):
    inputs = _inputs()
    want = _loss_and_grads(lambda w, h, y: _reference(w, h, y, CAP), *inputs)
    got = _loss_and_grads(lambda w, h, y: loss_fn(OutputHead(w, CAP), h, y)[0], *inputs)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    # The check can fail: dropping the cap, or only tanh's derivative, is far outside the tolerance.
    uncapped = _loss_and_grads(lambda w, h, y: _reference(w, h, y, None), *inputs)
    assert (uncapped[0] - want[0]).abs() > 1.0
    weight, hidden, labels = inputs
    with torch.no_grad():
        logits = CAP * torch.tanh(hidden @ weight.T / CAP)
        grad = torch.softmax(logits, -1) - F.one_hot(labels.clamp(min=0), VOCAB)
        grad = grad * (labels != -100)[..., None]
        no_derivative = grad @ weight  # d(loss)/d(hidden) without tanh's slope
    assert (no_derivative - want[2]).abs().max() > 1e-2


def test_fused_backward_carries_the_cap():
    """The chunked loss takes its fused path here (gradients made in the forward pass)."""
    loss_fn = ChunkedCrossEntropyLoss(num_chunks=2)
    weight, hidden, _ = _inputs()
    assert loss_fn._fused_backward(weight, hidden)


def test_no_grad_path_is_capped_too():
    weight, hidden, labels = _inputs()
    with torch.no_grad():
        got, n = ChunkedCrossEntropyLoss(num_chunks=4)(OutputHead(weight, CAP), hidden, labels)
        want = _reference(weight, hidden, labels, CAP)
    assert n == int((labels != -100).sum())
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)


def test_token_loss_applies_the_models_cap_and_equals_its_logits():
    torch.manual_seed(0)
    model = gemma2(
        vocab_size=VOCAB,
        num_layers=2,
        num_heads=2,
        num_kv_heads=1,
        embed_dim=DIM,
        intermediate_dim=48,
        max_seq_len=64,
        head_dim=16,
        sliding_window=4,
        query_pre_attn_scalar=16,
        final_logit_softcap=CAP,
    )
    with torch.no_grad():
        model.tok_embeddings.weight.mul_(30.0)  # logits beyond the cap
    assert model.head.softcap == CAP
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (2, 10), generator=gen)
    batch = on_device({"tokens": tokens, "labels": tokens.clone()}, torch.device("cpu"))
    loss = token_loss(ChunkedCrossEntropyLoss(num_chunks=2), model, model.hidden(tokens), batch)
    logits = model(tokens)  # the model's own, capped, output
    want = F.cross_entropy(logits.reshape(-1, VOCAB), batch.labels.reshape(-1), reduction="sum")
    torch.testing.assert_close(loss.sum, want, rtol=1e-5, atol=1e-4)
