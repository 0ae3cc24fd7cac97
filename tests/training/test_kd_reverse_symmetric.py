"""KDLoss(kl="reverse" | "symmetric"): loss and gradients against the divergences written out from full
logits here, the mutant checks (neither may equal the forward KL), chunking, the argument rules."""

import sys
from pathlib import Path

import pytest
import torch

from ftune.models.smollm2 import smollm2
from ftune.modules.transformer import OutputHead
from ftune.training import KDLoss, compile_loss, distill_loss, on_device, teacher_hidden

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes"))
from spies import LargestVocabTensor  # noqa: E402

VOCAB = 80
CPU = torch.device("cpu")


def _model(seed: int, dim: int, std: float = 0.3) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = smollm2(
        vocab_size=VOCAB,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        embed_dim=dim,
        intermediate_dim=2 * dim,
        max_seq_len=64,
    )
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0.0, std)  # non-uniform distributions
    return net


def _batch(b: int = 3, s: int = 12) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (b, s), generator=g)
    labels = tokens.clone()
    labels[0, :4] = -100  # a masked prompt
    labels[1, -3:] = -100  # padding
    return {"tokens": tokens, "labels": labels}


def _written_out(student, teacher, batch, kd_ratio, kl, lam=None):
    """(1 - r) CE + r D from both models' full fp32 logits, each divergence a sum over the vocabulary:
    forward sum p (log p - log q), reverse sum q (log q - log p), symmetric lam fwd + (1 - lam) rev."""
    labels = torch.cat([batch["labels"][:, 1:], torch.full_like(batch["labels"][:, :1], -100)], 1)
    keep = labels != -100
    log_q = torch.log_softmax(student(batch["tokens"]).float()[keep], -1)  # (n, vocab)
    with torch.no_grad():
        log_p = torch.log_softmax(teacher(batch["tokens"]).float()[keep], -1)
    p, q = log_p.exp(), log_q.exp()
    ce = -log_q.gather(1, labels[keep][:, None]).sum()
    forward = (p * (log_p - log_q)).sum()
    reverse = (q * (log_q - log_p)).sum()
    divergence = {"forward": forward, "reverse": reverse}.get(kl)
    if kl == "symmetric":
        divergence = lam * forward + (1 - lam) * reverse
    return (1 - kd_ratio) * ce + kd_ratio * divergence, int(keep.sum())


def _kd(student, teacher, batch, loss_fn):
    """The KD recipes' loss_on: the teacher's hidden states, the student's, then distill_loss."""
    batch = on_device(batch, CPU)
    t_hidden = teacher_hidden(teacher, batch)
    hidden = student.hidden(batch.tokens, input_pos=batch.input_pos, mask=batch.mask)
    loss = distill_loss(loss_fn, student, hidden, batch, teacher, t_hidden)
    return loss.sum, loss.count


def _pair():
    # Another width (only the vocab is shared), and a more peaked teacher than the student: the forward
    # and the reverse KL of such a pair differ clearly (about 2x here), as they do in real distillation.
    return _model(0, 16), _model(1, 24, std=1.0).requires_grad_(False)


CASES = [
    ("reverse", None, 1.0, 1),
    ("reverse", None, 0.5, 4),
    ("reverse", None, 0.3, 7),
    ("symmetric", 0.5, 1.0, 3),
    ("symmetric", 0.9, 0.5, 5),
    ("symmetric", 0.2, 0.7, 1),
]


@pytest.mark.parametrize("kl, lam, kd_ratio, num_chunks", CASES)
def test_loss_and_gradients_equal_the_divergence_written_out(kl, lam, kd_ratio, num_chunks):
    student, teacher = _pair()
    batch = _batch()
    got, n = _kd(student, teacher, batch, KDLoss(kd_ratio, num_chunks, kl=kl, sym_kd_ratio=lam))
    grads = torch.autograd.grad(got, list(student.parameters()))
    want, n_want = _written_out(student, teacher, batch, kd_ratio, kl, lam)
    want_grads = torch.autograd.grad(want, list(student.parameters()))
    assert n == n_want == 3 * 11 - 3 - 3
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kl, lam", [("reverse", None), ("symmetric", 0.5), ("symmetric", 0.1)])
def test_the_new_divergences_are_not_the_forward_kl(kl, lam):
    """The mutant check: a branch that computed the forward KL instead would fail here (values and gradients)."""
    student, teacher = _pair()
    batch = _batch()
    got, _ = _kd(student, teacher, batch, KDLoss(1.0, 4, kl=kl, sym_kd_ratio=lam))
    grads = torch.autograd.grad(got, list(student.parameters()))
    forward, _ = _kd(student, teacher, batch, KDLoss(1.0, 4))
    forward_grads = torch.autograd.grad(forward, list(student.parameters()))
    assert abs(got.item() - forward.item()) > 0.05 * forward.item(), (got.item(), forward.item())
    assert max((g - f).abs().max().item() for g, f in zip(grads, forward_grads)) > 1e-3
    if kl == "symmetric":  # nor the reverse KL alone
        reverse, _ = _kd(student, teacher, batch, KDLoss(1.0, 4, kl="reverse"))
        assert abs(got.item() - reverse.item()) > 0.05 * reverse.item()


def test_symmetric_ends_are_forward_and_reverse():
    """λ = 1 is the forward KL (computed by the forward branch), λ = 0 the reverse one."""
    student, teacher = _pair()
    batch = _batch()
    with torch.no_grad():
        sym1, _ = _kd(student, teacher, batch, KDLoss(0.6, 3, kl="symmetric", sym_kd_ratio=1.0))
        sym0, _ = _kd(student, teacher, batch, KDLoss(0.6, 3, kl="symmetric", sym_kd_ratio=0.0))
        forward, _ = _kd(student, teacher, batch, KDLoss(0.6, 3))
        reverse, _ = _kd(student, teacher, batch, KDLoss(0.6, 3, kl="reverse"))
    torch.testing.assert_close(sym1, forward, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sym0, reverse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kl, lam", [("reverse", None), ("symmetric", 0.5)])
def test_teacher_equal_to_student_gives_zero(kl, lam):
    student = _model(0, 16)
    teacher = _model(0, 16).requires_grad_(False)
    got, _ = _kd(student, teacher, _batch(), KDLoss(1.0, 4, kl=kl, sym_kd_ratio=lam))
    grads = torch.autograd.grad(got, list(student.parameters()))
    assert abs(got.item()) < 1e-5, got
    assert max(g.abs().max().item() for g in grads) < 1e-5


@pytest.mark.parametrize("kl, lam", [("reverse", None), ("symmetric", 0.5)])
def test_chunks_never_hold_the_full_fp32_logits(kl, lam):
    student, teacher = _pair()
    batch = _batch(b=4, s=16)
    n = int((batch["labels"][:, 1:] != -100).sum())
    with LargestVocabTensor(VOCAB) as spy:
        loss, _ = _kd(student, teacher, batch, KDLoss(0.5, 8, kl=kl, sym_kd_ratio=lam))
        loss.backward()
    assert 0 < spy.rows <= -(-n // 8), f"largest fp32 (tokens, vocab) tensor: {spy.rows} rows of {n}"


def test_backward_keeps_one_fp32_logits_worth():
    """What reverse KL saves for backward is the student's fp32 logits of the tokens, once: nothing of the
    teacher's, no probabilities."""
    g = torch.Generator().manual_seed(0)
    n, dim, dim_t = 40, 16, 24
    weight = torch.randn(VOCAB, dim, generator=g, requires_grad=True)
    hidden = torch.randn(1, n, dim, generator=g, requires_grad=True)
    labels = torch.randint(0, VOCAB, (1, n), generator=g)
    teacher = (torch.randn(VOCAB, dim_t, generator=g), torch.randn(1, n, dim_t, generator=g))
    saved = []

    def pack(t):
        if t.shape[-1:] == (VOCAB,) and t.dtype == torch.float32 and t.data_ptr() != weight.data_ptr():
            saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss, _ = KDLoss(0.5, 4, kl="reverse")(
            OutputHead(weight, None), hidden, labels, OutputHead(teacher[0], None), teacher[1]
        )
    assert sum(saved) == n * VOCAB, f"saved {sum(saved)} fp32 vocab entries for {n} tokens"


def test_arguments_are_checked():
    with pytest.raises(ValueError, match=r"kl must be one of \['forward', 'reverse', 'symmetric'\].*loss.kl"):
        KDLoss(0.5, kl="js")
    with pytest.raises(ValueError, match="set it for 'symmetric'.*got kl 'symmetric', sym_kd_ratio None"):
        KDLoss(0.5, kl="symmetric")
    with pytest.raises(ValueError, match="leave it null otherwise; got kl 'reverse', sym_kd_ratio 0.5"):
        KDLoss(0.5, kl="reverse", sym_kd_ratio=0.5)
    for bad in (1.5, -0.1, True, "half"):
        with pytest.raises(ValueError, match=r"sym_kd_ratio must be a number in \[0, 1\].*loss.sym_kd_ratio"):
            KDLoss(0.5, kl="symmetric", sym_kd_ratio=bad)


@pytest.mark.slow
@pytest.mark.parametrize("kl, lam", [("reverse", None), ("symmetric", 0.5)])
def test_compiled_chunk_loss_equals_eager(kl, lam):
    """compile_loss compiles chunk_loss, autograd function included (about 30 s of inductor on 2 cores)."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(VOCAB, 16, generator=g, requires_grad=True)
    hidden = torch.randn(1, 40, 16, generator=g, requires_grad=True)
    labels = torch.randint(0, VOCAB, (1, 40), generator=g)
    teacher = (torch.randn(VOCAB, 24, generator=g), torch.randn(1, 40, 24, generator=g))
    t_head = OutputHead(teacher[0], None)
    eager, _ = KDLoss(0.5, 4, kl=kl, sym_kd_ratio=lam)(
        OutputHead(weight, None), hidden, labels, t_head, teacher[1]
    )
    compiled, _ = compile_loss(KDLoss(0.5, 4, kl=kl, sym_kd_ratio=lam))(
        OutputHead(weight, None), hidden, labels, t_head, teacher[1]
    )
    torch.testing.assert_close(compiled, eager)
    for a, b in zip(
        torch.autograd.grad(compiled, (weight, hidden)), torch.autograd.grad(eager, (weight, hidden))
    ):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
