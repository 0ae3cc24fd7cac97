"""KDLoss and distill_loss on tiny real decoders: the formula with full logits, chunking, KL 0 for
teacher == student, the guards; check_same_vocab on real tokenizers."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from ftune.models.smollm2 import smollm2, smollm2_tokenizer
from ftune.modules.transformer import OutputHead
from ftune.training import KDLoss, check_same_vocab, distill_loss, on_device, teacher_hidden

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes"))
from spies import LargestVocabTensor  # noqa: E402

VOCAB = 96
CPU = torch.device("cpu")


def _model(seed: int, dim: int) -> torch.nn.Module:
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
            p.normal_(0.0, 0.3)  # a peaked, non-uniform distribution
    return net


def _batch(b: int = 3, s: int = 12) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (b, s), generator=g)
    labels = tokens.clone()
    labels[0, :5] = -100  # a masked prompt
    labels[2, -4:] = -100  # padding
    return {"tokens": tokens, "labels": labels}


def _reference(student, teacher, batch, kd_ratio):
    """(1 - r) CE + r KL(p || q) from the full logits of both models, KL written out: sum p (log p - log q)."""
    labels = torch.cat([batch["labels"][:, 1:], torch.full_like(batch["labels"][:, :1], -100)], 1)
    keep = labels != -100
    logits = student(batch["tokens"]).float()[keep]  # (n, vocab)
    with torch.no_grad():
        p = torch.softmax(teacher(batch["tokens"]).float()[keep], -1)
    log_q = torch.log_softmax(logits, -1)
    ce = -log_q.gather(1, labels[keep][:, None]).sum()
    kl = (p * (p.log() - log_q)).sum()
    return (1 - kd_ratio) * ce + kd_ratio * kl, int(keep.sum())


def _kd(student, teacher, batch, loss_fn):
    """The KD recipes' loss_on: the teacher's hidden states, the student's, then distill_loss."""
    batch = on_device(batch, CPU)
    t_hidden = teacher_hidden(teacher, batch)
    hidden = student.hidden(batch.tokens, input_pos=batch.input_pos, mask=batch.mask)
    loss = distill_loss(loss_fn, student, hidden, batch, teacher, t_hidden)
    return loss.sum, loss.count


@pytest.mark.parametrize("kd_ratio, num_chunks", [(0.5, 1), (0.5, 5), (1.0, 3), (0.0, 4)])
def test_loss_and_gradients_equal_the_formula_with_full_logits(kd_ratio, num_chunks):
    student, teacher = (
        _model(0, 16),
        _model(1, 24).requires_grad_(False),
    )  # another width: only the vocab is shared
    batch = _batch()
    got, n = _kd(student, teacher, batch, KDLoss(kd_ratio, num_chunks))
    grads = torch.autograd.grad(got, list(student.parameters()))
    want, n_want = _reference(student, teacher, batch, kd_ratio)
    want_grads = torch.autograd.grad(want, list(student.parameters()))
    assert n == n_want == 3 * 11 - 4 - 4
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


def test_teacher_equal_to_student_gives_kl_zero():
    student = _model(0, 16)
    teacher = _model(0, 16).requires_grad_(False)  # the same weights
    got, _ = _kd(student, teacher, _batch(), KDLoss(1.0, 4))
    grads = torch.autograd.grad(got, list(student.parameters()))
    assert abs(got.item()) < 1e-5, got
    assert max(g.abs().max().item() for g in grads) < 1e-5


def test_chunks_never_hold_the_full_fp32_logits_of_both_models():
    student, teacher = _model(0, 16), _model(1, 24).requires_grad_(False)
    batch = _batch(b=4, s=16)
    n = int((batch["labels"][:, 1:] != -100).sum())
    with LargestVocabTensor(VOCAB) as spy:
        loss, _ = _kd(student, teacher, batch, KDLoss(0.5, 8))
        loss.backward()
    assert 0 < spy.rows <= -(-n // 8), f"largest fp32 (tokens, vocab) tensor: {spy.rows} rows of {n}"
    with LargestVocabTensor(VOCAB) as whole:
        _reference(student, teacher, batch, 0.5)
    assert whole.rows >= n  # the spy sees full logits when they exist


def test_kd_ratio_0_is_the_students_cross_entropy():
    student, teacher, batch = _model(0, 16), _model(1, 24).requires_grad_(False), _batch()
    got, n = _kd(student, teacher, batch, KDLoss(0.0, 4))
    want, n_want = _reference(student, student, batch, 0.0)
    assert n == n_want
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "half", True])
def test_kd_ratio_outside_0_1_is_refused(bad):
    with pytest.raises(ValueError, match=r"kd_ratio must be a number in \[0, 1\].*loss.kd_ratio"):
        KDLoss(bad)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "assets"))
    from tiny_checkpoint import _tokenizer

    folder = tmp_path_factory.mktemp("tok")
    _tokenizer(folder)
    return folder


def _swapped(src: Path, dst: Path) -> Path:
    """A copy of a tokenizer whose two first merged tokens trade ids: same size, different mapping."""
    shutil.copytree(src, dst)
    data = json.loads((dst / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[-2:]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (dst / "tokenizer.json").write_text(json.dumps(data))
    return dst


def test_same_vocab_passes_and_a_different_mapping_is_named(tokenizer_dir, tmp_path):
    tok = smollm2_tokenizer(str(tokenizer_dir))
    check_same_vocab(tok, smollm2_tokenizer(str(tokenizer_dir)), _model(0, 16), _model(1, 24))
    other = smollm2_tokenizer(str(_swapped(tokenizer_dir, tmp_path / "swapped")))
    with pytest.raises(ValueError) as e:
        check_same_vocab(tok, other, _model(0, 16), _model(1, 24))
    message = str(e.value)
    assert "\n" not in message
    assert "2 ids map to different tokens, e.g. id 318" in message
    assert "tokenizer.path" in message and "teacher_tokenizer.path" in message and "swapped" in message


def test_a_different_output_vocabulary_is_named(tokenizer_dir):
    tok = smollm2_tokenizer(str(tokenizer_dir))
    wide = smollm2(
        vocab_size=VOCAB + 32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        embed_dim=16,
        intermediate_dim=32,
        max_seq_len=64,
    )
    with pytest.raises(ValueError, match=rf"output rows {VOCAB} \(model\) vs {VOCAB + 32} \(teacher_model\)"):
        check_same_vocab(tok, tok, _model(0, 16), wide)


def test_backward_keeps_one_fp32_logits_worth_of_the_student_only():
    """What the loss saves for backward, over all chunks, is the size of the student's fp32 logits of
    the labelled tokens (what chunked cross-entropy keeps): nothing of the teacher's."""
    g = torch.Generator().manual_seed(0)
    n, dim, dim_t = 40, 16, 24
    weight = torch.randn(VOCAB, dim, generator=g, requires_grad=True)
    hidden = torch.randn(1, n, dim, generator=g, requires_grad=True)
    labels = torch.randint(0, VOCAB, (1, n), generator=g)
    loss_fn = KDLoss(0.5, 4)
    teacher = (torch.randn(VOCAB, dim_t, generator=g), torch.randn(1, n, dim_t, generator=g))
    saved = []

    def pack(t):  # the (dim, vocab) view of the output weight that each chunk's matmul keeps is no copy
        if t.shape[-1:] == (VOCAB,) and t.dtype == torch.float32 and t.data_ptr() != weight.data_ptr():
            saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss, _ = loss_fn(OutputHead(weight, None), hidden, labels, OutputHead(teacher[0], None), teacher[1])
    assert sum(saved) == n * VOCAB, f"saved {sum(saved)} fp32 vocab entries for {n} tokens"
    loss.backward()
