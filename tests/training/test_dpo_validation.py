"""training.validate with the DPO recipes' loss_on: their validation pass, on models whose answers are known.

A unigram model (every position predicts the same distribution, softmax(w)) gives each answer the
log-probability sum_t log softmax(w)[token_t]: the figures of a pass follow by hand.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ftune.data import validation_loader
from ftune.data.collate import padded_collate_preference
from ftune.modules.transformer import OutputHead
from ftune.training import CrossEntropyLoss, DPOLoss, ReferenceModel, preference_loss, validate

CPU = torch.device("cpu")
VOCAB = 8
A, B, PROMPT = 5, 6, 3  # answer tokens and the prompt's token


class Unigram(nn.Module):
    """Predicts softmax(logits) at every position, whatever the input: log p(answer) is a sum of constants."""

    def __init__(self, logits: list[float]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(logits)[:, None])  # (vocab, dim=1)
        self.dropout = nn.Dropout(0.5)  # draws from the RNG in train mode only

    @property
    def head(self) -> OutputHead:
        return OutputHead(self.weight, None)

    def hidden(self, tokens, *, input_pos=None, mask=None):
        return self.dropout(torch.ones(*tokens.shape, 1))


def logprob(model: Unigram, token: int) -> float:
    return F.log_softmax(model.weight[:, 0].double(), dim=0)[token].item()


def pair(chosen: list[int], rejected: list[int]) -> dict[str, list[int]]:
    """A pair whose prompt is two PROMPT tokens (masked) and whose answers are the given tokens."""
    item = {}
    for side, answer in (("chosen", chosen), ("rejected", rejected)):
        item[f"{side}_tokens"] = [PROMPT, PROMPT, *answer]
        item[f"{side}_labels"] = [-100, -100, *answer]
    return item


# Pairs 0-2 choose A-answers over B-answers, pair 3 the reverse; pair 4 differs in length only.
PAIRS = [pair([A, A], [B, B]), pair([A], [B]), pair([A, A, A], [B, A, B]), pair([B], [A]), pair([A], [A, A])]


def models():
    # The policy prefers A, the reference (the model before training) prefers B.
    return Unigram([0.0] * 5 + [2.0, 0.5, 0.0]), Unigram([0.0] * 5 + [0.3, 1.5, 0.0])


def by_hand(policy: Unigram, reference: Unigram, beta: float) -> dict[str, float]:
    rows = {"loss": [], "chosen": [], "rejected": [], "logps": [], "ref_logps": []}
    for p in PAIRS:
        answers = [p["chosen_tokens"][2:], p["rejected_tokens"][2:]]
        pc, pr = (sum(logprob(policy, t) for t in a) for a in answers)
        rc, rr = (sum(logprob(reference, t) for t in a) for a in answers)
        h = beta * ((pc - rc) - (pr - rr))
        rows["loss"].append(-math.log(1 / (1 + math.exp(-h))))
        rows["chosen"].append(beta * (pc - rc))
        rows["rejected"].append(beta * (pr - rr))
        rows["logps"].append(float(pc > pr))
        rows["ref_logps"].append(float(rc > rr))
    n = len(PAIRS)
    chosen, rejected = rows["chosen"], rows["rejected"]
    return {
        "val_loss": sum(rows["loss"]) / n,
        "val_rewards/chosen": sum(chosen) / n,
        "val_rewards/rejected": sum(rejected) / n,
        "val_rewards/margin": (sum(chosen) - sum(rejected)) / n,
        "val_rewards/accuracy": sum(c > r for c, r in zip(chosen, rejected)) / n,
        "val_logps/accuracy": sum(rows["logps"]) / n,
        "val_logps/reference_accuracy": sum(rows["ref_logps"]) / n,
    }


def loader(batch_size: int):
    return validation_loader(
        PAIRS, batch_size=batch_size, collate_fn=lambda b: padded_collate_preference(b, pad_id=0)
    )


def evaluate(policy, reference, loss_fn, batches, max_batches=None) -> dict[str, float]:
    """The DPO recipes' validation: validate() over their loss_on."""

    def loss_on(batch):
        reference_logps = reference.row_logps(loss_fn, batch)
        hidden = policy.hidden(batch.tokens, input_pos=batch.input_pos, mask=batch.mask)
        return preference_loss(loss_fn, policy, hidden, batch, reference_logps)

    return validate(loss_on, policy, batches, device=CPU, max_batches=max_batches)


def run(policy: Unigram, reference: Unigram, batch_size: int = 2, beta: float = 0.1) -> dict[str, float]:
    """A sigmoid-DPO pass over PAIRS."""
    ref = ReferenceModel.frozen(reference)
    return evaluate(policy, ref, DPOLoss("sigmoid", beta=beta), loader(batch_size))


@pytest.mark.parametrize("batch_size", [1, 2, 5])
def test_figures_equal_the_formula_whatever_the_batching(batch_size):
    policy, reference = models()
    got = run(policy, reference, batch_size)
    want = by_hand(policy, reference, beta=0.1)
    assert set(got) == set(want)
    assert got == pytest.approx(want, rel=1e-6, abs=1e-7)
    # Known answers: the policy ranks A over B (pairs 0-2 right, pair 3 wrong; for pair 4 one A beats two),
    # the reference the other way round (only pair 3 and the shorter answer of pair 4).
    assert got["val_logps/accuracy"] == 4 / 5
    assert got["val_logps/reference_accuracy"] == 2 / 5


def test_a_policy_equal_to_its_reference_has_zero_rewards_and_log_2_loss():
    """What a pass at step 0 would log: only the log-probability accuracy says anything, and it is the
    reference's, which every pass reports."""
    policy, _ = models()
    got = run(policy, models()[0])
    assert got["val_loss"] == pytest.approx(math.log(2))
    assert got["val_rewards/chosen"] == got["val_rewards/margin"] == got["val_rewards/accuracy"] == 0
    assert got["val_logps/accuracy"] == got["val_logps/reference_accuracy"] == 4 / 5


def test_simpo_runs_no_reference():
    policy, reference = models()
    loss_fn = DPOLoss("simpo", beta=2.0, gamma=0.5)
    got = evaluate(policy, ReferenceModel.frozen(reference), loss_fn, loader(5))
    answers = [p["chosen_tokens"][2:] for p in PAIRS]
    chosen = [2.0 * sum(logprob(policy, t) for t in a) / len(a) for a in answers]  # beta * mean log p
    assert got["val_rewards/chosen"] == pytest.approx(sum(chosen) / len(PAIRS), rel=1e-6)
    assert "val_logps/reference_accuracy" not in got and got["val_logps/accuracy"] == 4 / 5


def test_max_batches_reads_only_the_first_batches():
    policy, reference = models()
    ref = ReferenceModel.frozen(reference)
    first_two = evaluate(policy, ref, DPOLoss("sigmoid", beta=0.1), loader(1), max_batches=2)
    assert first_two["val_logps/accuracy"] == 1.0 and first_two["val_logps/reference_accuracy"] == 0.0


def test_the_pass_changes_no_weight_no_mode_and_no_rng_state():
    """Dropout is off during the pass and the training mode comes back; the global RNG (the training
    dropout's) is where it was, also after iterating the validation loader."""
    policy, reference = models()
    policy.train()
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    torch.manual_seed(0)
    rng = torch.get_rng_state()
    a, b = run(policy, reference), run(policy, reference)
    assert torch.equal(torch.get_rng_state(), rng)
    assert a == b  # no dropout: the same figures every time
    assert policy.training and all(torch.equal(before[k], v) for k, v in policy.state_dict().items())
    assert policy.weight.grad is None


def test_bad_arguments_are_refused_with_a_message():
    policy, reference = models()
    ref, dpo = ReferenceModel.frozen(reference), DPOLoss("sigmoid", beta=0.1)
    with pytest.raises(ValueError, match=r"validate: max_batches must be >= 0 or None, got -1"):
        evaluate(policy, ref, dpo, loader(2), max_batches=-1)
    with pytest.raises(ValueError, match=r"validation counted nothing to average \(max_batches=0\)"):
        evaluate(policy, ref, dpo, loader(2), max_batches=0)
    with pytest.raises(
        ValueError,
        match=r"loss: the DPO recipes score answers against each other and need loss._component_=ftune.training.DPOLoss",
    ):
        evaluate(policy, ref, CrossEntropyLoss(), loader(2))
    assert policy.training  # restored after the error
