import copy
import logging

import pytest
import torch
from recipe_step import train_step

from ftune.training.step.loss import ChunkedCrossEntropyLoss, CrossEntropyLoss
from ftune.training.step.micro_batch import shift_labels
from ftune.training.step.schedulers import linear_with_warmup
from ftune.training.step.step_loss import NonFiniteError, StepStats, accumulate, validate
from ftune.training.step.token_loss import batch_loss, token_loss

CPU = torch.device("cpu")


def _two_rows(batch_factory):
    """Two rows of one length with very different numbers of labelled tokens (9 and 3)."""
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (2, 10), generator=g).tolist()
    labels = [list(tokens[0]), [-100] * 7 + tokens[1][7:]]
    full = batch_factory(tokens, labels)
    halves = [batch_factory([tokens[i]], [labels[i]]) for i in range(2)]
    return full, halves


def _sgd_step(model, micro_batches, **kwargs) -> tuple[StepStats, dict[str, torch.Tensor]]:
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    stats = train_step(model, ChunkedCrossEntropyLoss(4), micro_batches, opt, step=1, device=CPU, **kwargs)
    # With SGD at lr 1, the update is minus the (clipped) gradient.
    return stats, {k: before[k] - v.detach() for k, v in model.named_parameters()}


def test_accumulation_equals_one_big_batch_with_unequal_token_counts(tiny_model, batch_factory):
    full, halves = _two_rows(batch_factory)
    model = tiny_model()
    twin = copy.deepcopy(model)
    stats_full, grads_full = _sgd_step(model, [full])
    stats_acc, grads_acc = _sgd_step(twin, halves)

    assert stats_full.num_tokens == stats_acc.num_tokens == 9 + 3
    assert stats_acc.loss == pytest.approx(stats_full.loss, rel=1e-6)
    for name in grads_full:
        torch.testing.assert_close(grads_acc[name], grads_full[name], rtol=1e-5, atol=1e-6)

    # The test is sensitive: a mean of per-micro-batch means is a different number.
    loss_fn = CrossEntropyLoss()
    means = [batch_loss(tiny_model(), loss_fn, b, device=CPU) for b in halves]
    mean_of_means = sum(s.item() / n for s, n in means) / 2
    assert abs(mean_of_means - stats_full.loss) > 1e-3


def test_clipping_bounds_the_update_and_reports_the_pre_clip_norm(tiny_model, batch_factory):
    full, _ = _two_rows(batch_factory)
    _, grads = _sgd_step(tiny_model(), [full])
    unclipped_norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads.values()])).item()

    stats, clipped = _sgd_step(tiny_model(), [full], clip_grad_norm=0.01)
    clipped_norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in clipped.values()])).item()
    assert stats.grad_norm == pytest.approx(unclipped_norm, rel=1e-5)
    assert unclipped_norm > 0.1
    assert clipped_norm == pytest.approx(0.01, rel=1e-3)

    stats, _ = _sgd_step(tiny_model(), [full])
    assert stats.grad_norm is None


def test_non_finite_loss_raises_with_step_and_keeps_weights(tiny_model, batch_factory):
    full, _ = _two_rows(batch_factory)
    model = tiny_model()
    with torch.no_grad():
        model.tok_embeddings.weight[full["tokens"][0, 3]] = float("nan")
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = linear_with_warmup(opt, num_warmup_steps=0, num_training_steps=10)
    with pytest.raises(NonFiniteError, match=r"Non-finite loss or gradient at step 7: loss=nan") as info:
        train_step(model, CrossEntropyLoss(), [full], opt, step=7, device=CPU, scheduler=sched)
    assert info.value.step == 7
    for k, v in model.state_dict().items():
        assert torch.equal(v.nan_to_num(), before[k].nan_to_num()), k
    assert all(p.grad is None for p in model.parameters())
    assert sched.last_epoch == 0 and opt.param_groups[0]["lr"] == 1e-2


def test_non_finite_grad_norm_raises_with_finite_loss(tiny_model, batch_factory):
    full, _ = _two_rows(batch_factory)
    model = tiny_model()
    model.norm.weight.register_hook(lambda g: g * float("inf"))
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError, match=r"at step 3: loss=\d.*grad_norm=(inf|nan)"):
        train_step(model, CrossEntropyLoss(), [full], opt, step=3, device=CPU, clip_grad_norm=1.0)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_reports_lr_of_the_step_and_steps_the_scheduler(tiny_model, batch_factory):
    full, _ = _two_rows(batch_factory)
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sched = linear_with_warmup(opt, num_warmup_steps=2, num_training_steps=4)
    lrs = [
        train_step(model, CrossEntropyLoss(), [full], opt, step=i, device=CPU, scheduler=sched).lr
        for i in range(1, 4)
    ]
    assert lrs == pytest.approx([0.0, 0.25, 0.5])


def test_shift_labels_ignores_the_last_position_and_document_starts():
    labels = torch.tensor([[1, 2, 3, 4, 5, 6]])
    assert shift_labels(labels).tolist() == [[2, 3, 4, 5, 6, -100]]
    document_ids = torch.tensor([[0, 0, 0, 1, 1, 2]])
    assert shift_labels(labels, document_ids).tolist() == [[2, 3, -100, 5, -100, -100]]


def test_packed_batch_loss_equals_the_unpacked_documents(tiny_model, batch_factory):
    model = tiny_model()
    doc_a, doc_b = [5, 9, 2, 7, 3], [11, 4, 8]
    packed = batch_factory(
        [doc_a + doc_b],
        [doc_a + doc_b],
        input_pos=[[0, 1, 2, 3, 4, 0, 1, 2]],
        document_ids=[[0] * 5 + [1] * 3],
    )
    loss_fn = CrossEntropyLoss()
    packed_sum, packed_n = batch_loss(model, loss_fn, packed, device=CPU)
    sums, counts = zip(
        *(batch_loss(model, loss_fn, batch_factory([d], [d]), device=CPU) for d in (doc_a, doc_b))
    )
    assert packed_n == sum(counts) == 4 + 2
    torch.testing.assert_close(packed_sum, sum(sums), rtol=1e-5, atol=1e-5)


def test_zero_labelled_tokens_gives_zero_loss_and_warns(tiny_model, batch_factory, caplog):
    model = tiny_model()
    batch = batch_factory([[1, 2, 3]], [[-100, -100, -100]])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with caplog.at_level(logging.WARNING):
        stats = train_step(model, CrossEntropyLoss(), [batch], opt, step=2, device=CPU)
    assert stats.loss == 0.0 and stats.num_tokens == 0
    assert "Step 2 has no labelled tokens" in caplog.text


def test_argument_errors(tiny_model, batch_factory):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = batch_factory([[1, 2, 3]], [[1, 2, 3]])
    with pytest.raises(ValueError, match=r"StepLoss\(step=4\) got no micro-batches"):
        train_step(model, CrossEntropyLoss(), [], opt, step=4, device=CPU)
    with pytest.raises(KeyError, match=r"Batch is missing \['labels'\]; it has keys \['tokens'\]"):
        train_step(model, CrossEntropyLoss(), [{"tokens": batch["tokens"]}], opt, step=1, device=CPU)
    with pytest.raises(ValueError, match=r"'tokens' \[1, 3\] and 'labels' \[1, 2\] must have the same"):
        train_step(
            model, CrossEntropyLoss(), [{**batch, "labels": batch["labels"][:, :2]}], opt, step=1, device=CPU
        )


def test_accumulate_groups_batches_on_the_device_with_labels_shifted_once(batch_factory):
    batches = [batch_factory([[i, i + 1, i + 2]], [[i, i + 1, i + 2]]) for i in range(5)]

    def firsts(groups):
        return [[int(b.tokens[0, 0]) for b in group] for group in groups]

    assert firsts(accumulate(batches, 2, device=CPU)) == [[0, 1], [2, 3], [4]]
    assert firsts(accumulate(batches, 2, device=CPU, drop_last=True)) == [[0, 1], [2, 3]]
    assert firsts(accumulate(iter(batches[:3]), 1, device=CPU)) == [[0], [1], [2]]
    first = next(iter(accumulate(batches, 1, device=CPU)))[0]
    assert first.labels.tolist() == [[1, 2, -100]]  # shifted: position t is labelled with token t + 1
    with pytest.raises(ValueError, match="grad_accum_steps must be a positive int, got 0"):
        list(accumulate(batches, 0, device=CPU))


def test_validate_is_a_token_mean_without_grads_and_restores_mode(tiny_model, batch_factory):
    full, halves = _two_rows(batch_factory)
    model = tiny_model(dropout=0.5)
    loss_fn = CrossEntropyLoss()

    def eval_loss(model, loss_fn, batches, *, device, max_batches=None):
        def loss_on(batch):  # the supervised recipes' loss_on
            hidden = model.hidden(batch.tokens, input_pos=batch.input_pos, mask=batch.mask)
            return token_loss(loss_fn, model, hidden, batch)

        return validate(loss_on, model, batches, device=device, max_batches=max_batches)["val_loss"]

    model.eval()
    with torch.no_grad():
        expected_sum, expected_n = batch_loss(model, loss_fn, full, device=CPU)
    model.train()

    assert eval_loss(model, loss_fn, halves, device=CPU) == pytest.approx(
        expected_sum.item() / expected_n, rel=1e-5
    )
    assert model.training and all(p.grad is None for p in model.parameters())
    model.eval()
    eval_loss(model, loss_fn, halves, device=CPU, max_batches=1)
    assert not model.training

    first_sum, first_n = batch_loss(model, loss_fn, halves[0], device=CPU)
    assert eval_loss(model, loss_fn, halves, device=CPU, max_batches=1) == pytest.approx(
        first_sum.item() / first_n
    )
    with pytest.raises(ValueError, match=r"validation counted nothing to average \(max_batches=0\)"):
        eval_loss(model, loss_fn, halves, device=CPU, max_batches=0)
