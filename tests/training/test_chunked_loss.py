import pytest
import torch
import torch.nn.functional as F

from ftune.modules.transformer import OutputHead
from ftune.training.step.loss import ChunkedCrossEntropyLoss, CrossEntropyLoss


def _inputs(b: int = 2, s: int = 13, d: int = 16, vocab: int = 50, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(vocab, d, generator=g, dtype=dtype, requires_grad=True)
    hidden = torch.randn(b, s, d, generator=g, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, vocab, (b, s), generator=g)
    labels[0, :4] = -100  # a masked prompt
    labels[1, -3:] = -100  # padding
    return weight, hidden, labels


def _reference(weight, hidden, labels):
    logits = (hidden.float() @ weight.float().T).reshape(-1, weight.shape[0])
    return F.cross_entropy(logits, labels.reshape(-1), ignore_index=-100, reduction="sum")


@pytest.mark.parametrize(
    "loss_fn", [CrossEntropyLoss(), *(ChunkedCrossEntropyLoss(n) for n in (1, 3, 8, 100))]
)
def test_loss_and_grads_equal_full_cross_entropy(loss_fn):
    weight, hidden, labels = _inputs()
    loss_sum, num_tokens = loss_fn(OutputHead(weight, None), hidden, labels)
    assert loss_sum.dtype == torch.float32 and loss_sum.dim() == 0
    assert num_tokens == int((labels != -100).sum()) == 2 * 13 - 7
    grads = torch.autograd.grad(loss_sum, (weight, hidden))

    w2, h2 = weight.detach().clone().requires_grad_(), hidden.detach().clone().requires_grad_()
    expected = _reference(w2, h2, labels)
    expected_grads = torch.autograd.grad(expected, (w2, h2))
    torch.testing.assert_close(loss_sum, expected, rtol=1e-5, atol=1e-5)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_chunks_are_contiguous_blocks_of_tokens(monkeypatch):
    loss_fn = ChunkedCrossEntropyLoss(num_chunks=4)
    seen = []
    original = loss_fn.chunk_loss

    def spy(weight, hidden, labels):
        seen.append((hidden.shape[0], hidden.is_contiguous()))
        return original(weight, hidden, labels)

    monkeypatch.setattr(loss_fn, "chunk_loss", spy)
    weight, hidden, labels = _inputs(b=3, s=8)
    loss_fn(OutputHead(weight, None), hidden, labels)
    assert seen == [(6, True)] * 4  # 24 tokens in 4 contiguous blocks, even with b > 1


def test_bf16_inputs_give_fp32_loss_close_to_fp32():
    weight, hidden, labels = _inputs(dtype=torch.bfloat16)
    loss_sum, _ = ChunkedCrossEntropyLoss(num_chunks=4)(OutputHead(weight, None), hidden, labels)
    assert loss_sum.dtype == torch.float32
    torch.testing.assert_close(loss_sum, _reference(weight, hidden, labels), rtol=2e-2, atol=0.0)


def test_all_ignored_gives_zero_loss_and_zero_tokens():
    weight, hidden, labels = _inputs()
    loss_sum, num_tokens = ChunkedCrossEntropyLoss()(
        OutputHead(weight, None), hidden, torch.full_like(labels, -100)
    )
    assert num_tokens == 0 and loss_sum.item() == 0.0


def test_shape_mismatch_is_explained():
    weight, hidden, labels = _inputs()
    with pytest.raises(ValueError, match=r"got weight \[50, 16\], hidden \[2, 13, 16\], labels \[2, 12\]"):
        ChunkedCrossEntropyLoss()(OutputHead(weight, None), hidden, labels[:, :-1])


def test_bad_num_chunks():
    with pytest.raises(ValueError, match="num_chunks must be a positive int, got 0"):
        ChunkedCrossEntropyLoss(num_chunks=0)
