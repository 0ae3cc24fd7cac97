"""ChunkedCrossEntropyLoss's fused path: gradients made in the forward pass, no logits saved for backward."""

import pytest
import torch
import torch.nn.functional as F

from ftune.modules.transformer import OutputHead
from ftune.training.step.linear_cross_entropy import linear_cross_entropy
from ftune.training.step.loss import ChunkedCrossEntropyLoss, CrossEntropyLoss

VOCAB, DIM = 50, 16


def _inputs(tokens: int = 26, dtype: torch.dtype = torch.float32, scale: float = 1.0):
    g = torch.Generator().manual_seed(0)
    weight = (torch.randn(VOCAB, DIM, generator=g) * scale).to(dtype).requires_grad_()
    hidden = torch.randn(1, tokens, DIM, generator=g).to(dtype).requires_grad_()
    labels = torch.randint(0, VOCAB, (1, tokens), generator=g)
    labels[0, :4] = -100
    return weight, hidden, labels


def _reference(weight, hidden, labels):
    """The plain block loop: autograd through F.linear, an fp32 upcast and F.cross_entropy."""
    w, h = weight.detach().clone().requires_grad_(), hidden.detach().clone().requires_grad_()
    loss = F.cross_entropy((h[0] @ w.T).float(), labels[0], ignore_index=-100, reduction="sum")
    (loss * 0.25).backward()
    return loss.detach(), w.grad, h.grad


@pytest.mark.parametrize("num_chunks", [1, 3, 8, 100])
def test_loss_and_gradients_equal_the_plain_path(num_chunks):
    weight, hidden, labels = _inputs()
    loss, tokens = ChunkedCrossEntropyLoss(num_chunks)(OutputHead(weight, None), hidden, labels)
    (loss * 0.25).backward()  # StepLoss scales the summed loss before backward
    want_loss, want_w, want_h = _reference(weight, hidden, labels)
    assert tokens == 22
    torch.testing.assert_close(loss.detach(), want_loss, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(weight.grad, want_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(hidden.grad, want_h, rtol=1e-5, atol=1e-6)


def test_bf16_gradients_match_the_plain_path_in_bf16():
    weight, hidden, labels = _inputs(dtype=torch.bfloat16)
    loss, _ = ChunkedCrossEntropyLoss(4)(OutputHead(weight, None), hidden, labels)
    (loss * 0.25).backward()
    want_loss, want_w, want_h = _reference(weight, hidden, labels)
    assert loss.dtype == torch.float32 and weight.grad.dtype == hidden.grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss.detach(), want_loss, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(hidden.grad, want_h, rtol=0, atol=0)  # same bf16 product
    # The weight's gradient sums the blocks in fp32 (the plain path sums them in bf16).
    torch.testing.assert_close(weight.grad.float(), want_w.float(), rtol=2e-2, atol=2e-3)


def test_a_frozen_weight_gets_no_gradient_and_hidden_still_does():
    weight, hidden, labels = _inputs()
    weight.requires_grad_(False)
    loss, _ = ChunkedCrossEntropyLoss(3)(OutputHead(weight, None), hidden, labels)
    (loss * 0.25).backward()
    _, _, want_h = _reference(weight.detach().requires_grad_(), hidden, labels)
    assert weight.grad is None
    torch.testing.assert_close(hidden.grad, want_h, rtol=1e-5, atol=1e-6)


def test_a_loss_beyond_float_underflow_is_still_exact():
    # Logits of scale ~1000: the labels' probabilities underflow to 0, so -log(p) would be inf.
    weight, hidden, labels = _inputs(scale=300.0)
    loss, _ = ChunkedCrossEntropyLoss(2)(OutputHead(weight, None), hidden, labels)
    want_loss, _, _ = _reference(weight, hidden, labels)
    assert torch.isfinite(loss) and loss.item() > 1000
    torch.testing.assert_close(loss.detach(), want_loss, rtol=1e-6, atol=1e-2)


def _largest_saved_elements(loss_fn, weight, hidden, labels) -> int:
    largest = 0

    def pack(t):
        nonlocal largest
        largest = max(largest, t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn(OutputHead(weight, None), hidden, labels)
    return largest


def test_no_logits_are_saved_for_backward():
    """The fused path's point: nothing of [tokens, vocab] waits for backward (the plain path saves it)."""
    weight, hidden, labels = _inputs(tokens=200)
    fused = ChunkedCrossEntropyLoss(2)
    plain = ChunkedCrossEntropyLoss(2)
    plain.fused_backward = False
    assert _largest_saved_elements(plain, weight, hidden, labels) == 100 * VOCAB  # a block's log-probs
    # Saved: the [tokens, dim] and [vocab, dim] gradients, nothing vocabulary-by-token.
    assert _largest_saved_elements(fused, weight, hidden, labels) == 200 * DIM


def test_without_grad_the_plain_block_loop_runs():
    weight, hidden, labels = _inputs()
    loss_fn = ChunkedCrossEntropyLoss(3)
    with torch.no_grad():
        assert not loss_fn._fused_backward(weight, hidden)
        loss, _ = loss_fn(OutputHead(weight, None), hidden, labels)
    torch.testing.assert_close(loss, _reference(weight, hidden, labels)[0], rtol=1e-6, atol=1e-5)
    assert not CrossEntropyLoss()._fused_backward(weight, hidden)  # the reference stays plain


def test_backward_twice_is_refused_with_a_message():
    weight, hidden, labels = _inputs()
    loss = linear_cross_entropy(hidden[0], weight, labels[0], num_chunks=2, ignore_index=-100)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward ran twice.*retain_graph"):
        loss.backward()
