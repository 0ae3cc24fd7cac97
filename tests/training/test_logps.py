"""Log-probabilities from final hidden states through the model's head (ftune.training.methods.logps):
GRPO's per-token ones (a backward that recomputes each block) and DPO's per-sequence sums, against the
full log-softmax, with a soft-capped head (Gemma 2) as well."""

import torch
import torch.nn.functional as F

from ftune.modules.softcap import softcap
from ftune.modules.transformer import OutputHead
from ftune.training import GRPOLoss
from ftune.training.methods.logps import sequence_logps, target_logps


def _loss(loss_type):
    return GRPOLoss(
        loss_type, epsilon=0.2, epsilon_high=0.28, beta=0.04, max_completion_length=None, num_chunks=3
    )


def _hidden_case(seed=0, vocab=50, dim=8):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(vocab, dim, generator=g).requires_grad_()
    hidden = torch.randn(3, 7, dim, generator=g).requires_grad_()
    labels = torch.randint(0, vocab, (3, 7), generator=g)
    labels[0, 5:] = -100
    labels[2, :] = -100
    labels[2, 1] = 4
    return weight, hidden, labels


def test_token_logps_equal_the_full_log_softmax_with_the_same_gradients():
    weight, hidden, labels = _hidden_case()
    upstream = torch.randn(labels.shape, generator=torch.Generator().manual_seed(9))
    ours = _loss("grpo").token_logps(OutputHead(weight, None), hidden, labels)
    keep = labels != -100
    full = F.log_softmax(F.linear(hidden, weight).float(), dim=-1)
    expected = full.gather(2, labels.clamp(min=0)[..., None]).squeeze(2) * keep
    torch.testing.assert_close(ours, expected)
    grads = torch.autograd.grad((ours * upstream).sum(), (hidden, weight))
    grads_ref = torch.autograd.grad((expected * upstream).sum(), (hidden, weight))
    for got, want in zip(grads, grads_ref):
        torch.testing.assert_close(got, want)
    # the rows' sums are DPO's sequence log-probabilities
    sums, counts = sequence_logps(OutputHead(weight, None), hidden, labels, num_chunks=2)
    torch.testing.assert_close(ours.sum(1), sums)


def test_token_logps_of_a_capped_head_equal_the_capped_log_softmax_with_the_same_gradients():
    """Gemma 2's final soft-cap in GRPO's log-probabilities: forward and the recomputing backward."""
    weight, hidden, labels = _hidden_case(seed=3)
    with torch.no_grad():
        weight.mul_(4.0)  # logits well past the cap
    cap = 2.5
    upstream = torch.randn(labels.shape, generator=torch.Generator().manual_seed(5))
    ours = target_logps(OutputHead(weight, cap), hidden, labels, num_chunks=3)
    keep = labels != -100
    full = F.log_softmax(softcap(F.linear(hidden, weight).float(), cap), dim=-1)
    expected = full.gather(2, labels.clamp(min=0)[..., None]).squeeze(2) * keep
    torch.testing.assert_close(ours, expected)
    grads = torch.autograd.grad((ours * upstream).sum(), (hidden, weight))
    grads_ref = torch.autograd.grad((expected * upstream).sum(), (hidden, weight))
    for got, want in zip(grads, grads_ref):
        torch.testing.assert_close(got, want)
    uncapped = target_logps(OutputHead(weight, None), hidden, labels, num_chunks=3)
    assert (uncapped - ours).abs().max() > 1.0  # the cap matters here: a dropped cap fails above
    sums, _ = sequence_logps(OutputHead(weight, cap), hidden, labels, num_chunks=2)
    torch.testing.assert_close(ours.sum(1), sums)  # DPO's sequence log-probabilities are capped too


def test_token_logps_with_a_frozen_weight_and_no_labels():
    weight, hidden, labels = _hidden_case(seed=1)
    weight = weight.detach()
    ours = target_logps(OutputHead(weight, None), hidden, labels, num_chunks=4)
    (grad,) = torch.autograd.grad(ours.sum(), hidden)
    full = (
        F.log_softmax(F.linear(hidden, weight), dim=-1).gather(2, labels.clamp(min=0)[..., None]).squeeze(2)
    )
    (grad_ref,) = torch.autograd.grad((full * (labels != -100)).sum(), hidden)
    torch.testing.assert_close(grad, grad_ref)
    none = target_logps(OutputHead(weight, None), hidden, torch.full_like(labels, -100), num_chunks=2)
    assert none.abs().sum() == 0 and none.requires_grad


def _saved_bytes(fn, weight, hidden, labels) -> int:
    """Bytes autograd saves for backward in ``fn``, besides the inputs themselves (they exist anyway)."""
    inputs = {weight.untyped_storage().data_ptr(), hidden.untyped_storage().data_ptr()}
    saved = []

    def pack(t):
        if t.untyped_storage().data_ptr() not in inputs:
            saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(OutputHead(weight, None), hidden, labels, num_chunks=2)
    return sum(saved)


def test_token_logps_save_no_logits_for_backward():
    """What autograd keeps between forward and backward is far smaller than the labelled tokens' fp32
    logits; the plain chunked loop (DPO's sequence_logps) keeps them all, which this check sees."""
    vocab, dim = 512, 8
    weight, hidden, labels = _hidden_case(vocab=vocab, dim=dim)
    logits_bytes = int((labels != -100).sum()) * vocab * 4
    assert _saved_bytes(target_logps, weight, hidden, labels) < logits_bytes // 10
    assert _saved_bytes(sequence_logps, weight, hidden, labels) >= logits_bytes
