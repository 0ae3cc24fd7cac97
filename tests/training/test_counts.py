"""Every loss is divided by one count, the same in training and validation, and it is the right one.

For each loss a recipe can run (cross-entropy, KD, DPO's four types, ORPO, KTO, GRPO's three aggregations), two
micro-batches of unequal counts go through the step (`StepLoss`, divided by the recipe's `per` before
backward) and through `validate` (divided by `Loss.count`). Checked:
- each micro-batch's `Loss.count` is `per(batch)`: the step and validation count the same units;
- the step's loss and validation's loss both equal the mean written out here over every unit of
  the two micro-batches (labelled tokens, pairs, sequences, ...), computed from full logits.
A mutant normaliser (the count of another unit) fails the second check, in the step or in validation.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ftune.training import (
    ChunkedCrossEntropyLoss,
    CrossEntropyLoss,
    DPOLoss,
    GRPOLoss,
    KDLoss,
    KTOLoss,
    PairLogps,
    RolloutBatch,
    StepLoss,
    distill_loss,
    grpo_loss,
    on_device,
    per_pair,
    per_token,
    preference_loss,
    teacher_hidden,
    token_loss,
    validate,
)
from ftune.training.step import token_loss as token_loss_module

CPU = torch.device("cpu")
VOCAB = 64


def _labels(rows: int, seq: int, lengths: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows whose last `lengths[i]` positions are labelled (a masked prompt before them)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, VOCAB, (rows, seq), generator=g)
    labels = tokens.clone()
    for i, n in enumerate(lengths):
        labels[i, : seq - n] = -100
    return tokens, labels


def _batches(lengths: list[list[int]], seq: int = 10) -> list[dict[str, torch.Tensor]]:
    out = []
    for k, rows in enumerate(lengths):
        tokens, labels = _labels(len(rows), seq, rows, seed=k)
        out.append({"tokens": tokens, "labels": labels})
    return out


def _step_and_validation(model, loss_on, per, batches) -> tuple[float, float]:
    micro = [on_device(b, CPU) for b in batches]
    for b in micro:
        assert loss_on(b).count == int(per(b)), "the loss's count is not the step's normaliser"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    step = StepLoss(micro, optimizer, step=1, device=CPU, per=per)
    for b in micro:
        step.scaled(loss_on(b)).backward()
    val = validate(loss_on, model, micro, device=CPU, max_batches=None)
    return step.finish().loss, val["val_loss"]


def _token_logps(model, tokens) -> torch.Tensor:
    with torch.no_grad():
        return F.log_softmax(model(tokens).float(), dim=-1)  # (b, s, vocab)


def _shifted(labels: torch.Tensor) -> torch.Tensor:
    return torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], dim=1)


# ---- the losses ---------------------------------------------------------------------------------------


def check_cross_entropy(model, loss_fn) -> None:
    batches = _batches([[3, 7], [2, 2, 9]])

    def loss_on(b):
        return token_loss(loss_fn, model, model.hidden(b.tokens), b)

    step, val = _step_and_validation(model, loss_on, per_token, batches)
    nll = [F.nll_loss(_token_logps(model, b["tokens"]).transpose(1, 2), _shifted(b["labels"]), reduction="sum")
           for b in batches]  # fmt: skip
    tokens = sum(int((_shifted(b["labels"]) != -100).sum()) for b in batches)
    want = float(sum(nll)) / tokens
    assert step == pytest.approx(want, rel=1e-5) and val == pytest.approx(want, rel=1e-5)


def check_distillation(student, teacher, ratio: float = 0.5) -> None:
    batches = _batches([[4, 1], [6, 3, 2]])
    loss_fn = KDLoss(ratio, num_chunks=2)

    def loss_on(b):
        return distill_loss(
            loss_fn, student, student.hidden(b.tokens), b, teacher, teacher_hidden(teacher, b)
        )

    step, val = _step_and_validation(student, loss_on, per_token, batches)
    total, tokens = 0.0, 0
    for b in batches:
        labels = _shifted(b["labels"])
        keep = labels != -100
        log_q, log_p = _token_logps(student, b["tokens"]), _token_logps(teacher, b["tokens"])
        ce = -log_q.gather(2, labels.clamp(min=0)[..., None]).squeeze(2)
        kl = (log_p.exp() * (log_p - log_q)).sum(-1)
        total += float((((1 - ratio) * ce + ratio * kl) * keep).sum())
        tokens += int(keep.sum())
    assert step == pytest.approx(total / tokens, rel=1e-5) and val == pytest.approx(total / tokens, rel=1e-5)


def _pair_batches() -> list[dict[str, torch.Tensor]]:
    """Preference batches: chosen rows, then rejected rows (2 pairs, then 3 pairs)."""
    return _batches([[3, 5, 2, 4], [1, 6, 2, 3, 4, 2]])


def _row_logps(model, tokens: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed log-probabilities of each row's labelled tokens (shifted labels), from full logits."""
    keep = labels != -100
    picked = _token_logps(model, tokens).gather(2, labels.clamp(min=0)[..., None]).squeeze(2)
    return (picked * keep).sum(1), keep.sum(1)


def check_preference(policy, reference, loss_fn: DPOLoss) -> None:
    batches = _pair_batches()

    def loss_on(b):
        ref = (
            PairLogps.from_rows(*_row_logps(reference, b.tokens, b.labels))
            if loss_fn.needs_reference
            else None
        )
        return preference_loss(loss_fn, policy, policy.hidden(b.tokens), b, ref)

    step, val = _step_and_validation(policy, loss_on, per_pair, batches)
    losses = []
    for b in batches:
        labels = _shifted(b["labels"])
        pol = PairLogps.from_rows(*_row_logps(policy, b["tokens"], labels))
        ref = (
            PairLogps.from_rows(*_row_logps(reference, b["tokens"], labels))
            if loss_fn.needs_reference
            else None
        )
        losses.append(loss_fn(pol, ref).losses)
    want = float(torch.cat(losses).mean())
    assert step == pytest.approx(want, rel=1e-5) and val == pytest.approx(want, rel=1e-5)


def check_orpo(model, beta: float = 0.1) -> None:
    """ORPO: the mean odds-ratio term over the step's pairs plus each micro-batch's NLL (of its chosen rows'
    every token after the first), weighted by its pairs."""
    batches, loss_fn = _pair_batches(), DPOLoss("orpo", beta=beta, num_chunks=3)

    def loss_on(b):
        return preference_loss(loss_fn, model, model.hidden(b.tokens), b, None)

    step, val = _step_and_validation(model, loss_on, per_pair, batches)
    total, pairs = 0.0, 0
    for b in batches:
        n = b["tokens"].shape[0] // 2
        logps, counts = _row_logps(model, b["tokens"], _shifted(b["labels"]))
        a = logps / counts  # mean log-probability a token of each answer
        h = (a[:n] - a[n:]) - (torch.log1p(-a[:n].exp()) - torch.log1p(-a[n:].exp()))
        chosen = b["tokens"][:n]
        nll = -_token_logps(model, chosen)[:, :-1].gather(2, chosen[:, 1:, None]).mean()
        total += float(-beta * F.logsigmoid(h).sum() + n * nll)
        pairs += n
    assert step == pytest.approx(total / pairs, rel=1e-5) and val == pytest.approx(total / pairs, rel=1e-5)


def check_kto(policy, reference, beta: float = 0.1, weights: tuple[float, float] = (1.0, 1.5)) -> None:
    """KTO: the mean over the step's completions of each one's weighted loss, the KL estimate of its batch."""
    loss_fn = KTOLoss(beta=beta, desirable_weight=weights[0], undesirable_weight=weights[1], num_chunks=2)
    kinds = [[1, 0, 2, 2], [0, 1, 1, 2, 2, 2]]  # desirable 1, undesirable 0, then the mismatched rows (2)
    batches = _batches([[3, 5, 2, 4], [1, 6, 2, 3, 4, 2]])
    for b, k in zip(batches, kinds):
        b["row_kinds"] = torch.tensor(k)

    def loss_on(b):
        ref = loss_fn.logps_of(reference.head, reference.hidden(b.tokens), b.labels)
        return preference_loss(loss_fn, policy, policy.hidden(b.tokens), b, ref)

    step, val = _step_and_validation(policy, loss_on, per_pair, batches)
    total, completions = 0.0, 0
    for b, k in zip(batches, kinds):
        n = len(k) // 2
        labels = _shifted(b["labels"])
        r = _row_logps(policy, b["tokens"], labels)[0] - _row_logps(reference, b["tokens"], labels)[0]
        z = r[n:].mean().clamp(min=0)
        for ratio, kind in zip(r[:n], k[:n]):
            total += float(
                weights[0] * (1 - torch.sigmoid(beta * (ratio - z)))
                if kind
                else weights[1] * (1 - torch.sigmoid(beta * (z - ratio)))
            )
        completions += n
    want = total / completions
    assert step == pytest.approx(want, rel=1e-5) and val == pytest.approx(want, rel=1e-5)


def check_grpo(model, loss_type: str, max_len: int = 8) -> None:
    """Ratio 1 and beta 0: every completion token of row i costs -A_i, so each aggregation is a plain mean."""
    lengths = [[3, 7, 1], [2, 5]]
    advantages = [torch.tensor([0.5, -1.0, 2.0]), torch.tensor([-0.25, 1.5])]
    loss_fn = GRPOLoss(loss_type, epsilon=0.2, epsilon_high=None, beta=0.0,
                       max_completion_length=max_len if loss_type == "dr_grpo" else None)  # fmt: skip
    batches = []
    for b, adv in zip(_batches(lengths), advantages):
        micro = on_device(b, CPU)
        batches.append(RolloutBatch(micro.tokens, micro.labels, None, None, advantages=adv, old_logps=None,
                                    ref_logps=None, temperature=1.0, metrics={}))  # fmt: skip

    def loss_on(b):
        return grpo_loss(loss_fn, model, model.hidden(b.tokens), b)

    step, val = _step_and_validation(model, loss_on, loss_fn.per, batches)
    rows = [(float(a), n) for adv, ns in zip(advantages, lengths) for a, n in zip(adv, ns)]
    want = {
        "grpo": sum(-a for a, _ in rows) / len(rows),
        "dapo": sum(-a * n for a, n in rows) / sum(n for _, n in rows),
        "dr_grpo": sum(-a * n for a, n in rows) / (len(rows) * max_len),
    }[loss_type]
    assert step == pytest.approx(want, rel=1e-5) and val == pytest.approx(want, rel=1e-5)


# ---- the tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss_fn", [CrossEntropyLoss(), ChunkedCrossEntropyLoss(num_chunks=3)])
def test_cross_entropy_counts_labelled_tokens_in_step_and_validation(tiny_model, loss_fn):
    check_cross_entropy(tiny_model(), loss_fn)


def test_distillation_counts_labelled_tokens_in_step_and_validation(tiny_model):
    check_distillation(tiny_model(seed=0), tiny_model(seed=1).requires_grad_(False))


@pytest.mark.parametrize(
    "loss_fn",
    [
        DPOLoss("sigmoid", beta=0.1),
        DPOLoss("hinge", beta=0.5),
        DPOLoss("ipo", beta=0.1),
        DPOLoss("simpo", beta=2.0, gamma=0.5),
    ],  # fmt: skip
    ids=["sigmoid", "hinge", "ipo", "simpo"],
)
def test_preference_losses_count_pairs_in_step_and_validation(tiny_model, loss_fn):
    check_preference(tiny_model(seed=0), tiny_model(seed=1).requires_grad_(False), loss_fn)


def test_orpo_counts_pairs_in_step_and_validation(tiny_model):
    check_orpo(tiny_model(seed=0))


def test_kto_counts_completions_in_step_and_validation(tiny_model):
    check_kto(tiny_model(seed=0), tiny_model(seed=1).requires_grad_(False))


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_grpo_aggregations_count_their_units_in_step_and_validation(tiny_model, loss_type):
    check_grpo(tiny_model(), loss_type)


def test_a_mutant_normaliser_fails(tiny_model, monkeypatch):
    """Counting rows instead of labelled tokens, in the loss helper or in GRPO's normaliser, fails."""
    rows = lambda batch: torch.tensor(batch.rows)  # noqa: E731 - the mutant
    with monkeypatch.context() as m:
        m.setattr(token_loss_module, "per_token", rows)
        with pytest.raises((AssertionError, ValueError)):
            check_cross_entropy(tiny_model(), CrossEntropyLoss())
    with monkeypatch.context() as m:
        m.setattr(GRPOLoss, "per", lambda self, batch: (batch.labels != -100).sum())  # dapo's count for grpo
        with pytest.raises(AssertionError):
            check_grpo(tiny_model(), "grpo")
    with monkeypatch.context() as m:
        from ftune.training.methods import preference_loss as preference_module

        m.setattr(preference_module, "per_pair", lambda batch: torch.tensor(batch.rows))  # rows, not pairs
        with pytest.raises(AssertionError):
            check_preference(tiny_model(seed=0), tiny_model(seed=1), DPOLoss("sigmoid", beta=0.1))
        with pytest.raises(AssertionError):
            check_orpo(tiny_model(seed=0))
    with monkeypatch.context() as m:
        from ftune.training.methods import kto_loss as kto_module

        m.setattr(kto_module, "per_pair", lambda batch: torch.tensor(batch.rows))  # rows, not completions
        with pytest.raises(AssertionError):
            check_kto(tiny_model(seed=0), tiny_model(seed=1))
