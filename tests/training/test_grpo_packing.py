"""Packed GRPO updates (issue 43): a rollout's rows laid end to end in one row (``rollout_batch(...,
padding_free=True)``) give the right-padded update's losses, metrics and gradients, for grpo, dapo and
dr_grpo, with a LoRA reference, a frozen one and none, with recomputed old log-probabilities, with a
stale rollout's importance weights, and for multi-turn trajectories (environment tokens unlabelled)."""

import copy

import pytest
import torch

from ftune.generation import Rollout
from ftune.generation.multi_turn import Trajectories, Trajectory
from ftune.models.smollm2 import smollm2
from ftune.peft import apply_lora
from ftune.training import GRPOLoss, ReferenceModel, RolloutBatch, grpo_loss, rollout_batch
from ftune.training.methods.rollout_batch import Scores
from ftune.training.methods.rollout_packing import pack_rows, rows_of

CPU = torch.device("cpu")
VOCAB, G = 64, 3
PROMPTS = [[5, 9, 11, 2], [7, 3]]  # two prompts of different lengths, G completions each
COMPLETION_LENGTHS = [6, 1, 4, 3, 5, 2]  # one row per completion: unequal, so the padded rows pad


def _model():
    torch.manual_seed(0)
    model = smollm2(
        vocab_size=VOCAB,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        embed_dim=32,
        intermediate_dim=64,
        max_seq_len=64,
    )
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.1)
    return model


def _rollout(seed=3) -> Rollout:
    g = torch.Generator().manual_seed(seed)
    width = max(COMPLETION_LENGTHS)
    ids = torch.randint(0, VOCAB, (len(COMPLETION_LENGTHS), width), generator=g)
    mask = (torch.arange(width)[None] < torch.tensor(COMPLETION_LENGTHS)[:, None]).long()
    return Rollout(
        prompt_ids=[p for p in PROMPTS for _ in range(G)],
        completion_ids=ids * mask,
        completion_mask=mask,
        logps=-torch.rand(mask.shape, generator=g) * mask,  # the sampler's (a stale rollout's weights)
        lengths=torch.tensor(COMPLETION_LENGTHS),
        finished=torch.tensor([True, False, True, True, False, True]),
        group_size=G,
        pad_id=0,
        logp_temperature=0.7,
    )


def _trajectories(seed=4) -> Trajectories:
    """Two turns with an environment answer between them; one trajectory ends on an environment answer."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i, n in enumerate(COMPLETION_LENGTHS):
        sampled = [True] * n + [False] * 3 + [True] * 2 + ([False] * 2 if i == 1 else [])
        tokens = torch.randint(0, VOCAB, (len(sampled),), generator=g).tolist()
        logps = [-0.5 if s else 0.0 for s in sampled]
        rows.append(Trajectory(PROMPTS[i // G], tokens, sampled, logps, turns=2, stop="done"))
    return Trajectories(rows, group_size=G, pad_id=0, logp_temperature=1.0)


def _scores():
    total = [1.0, 0.0, 0.5, 0.2, 1.0, 0.0]
    return Scores(total, {"r": total}, [""] * len(total))


def _setup(reference_kind, loss_type, beta):
    model = _model()
    frozen = copy.deepcopy(model)
    apply_lora(model, targets=["q_proj", "v_proj"], rank=4, alpha=8)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_b" in name:
                p.normal_(0, 0.3)  # trained adapters: the policy is not the reference
    reference = (
        ReferenceModel.frozen(frozen) if reference_kind == "frozen" else ReferenceModel.adapters_off(model)
    )
    max_len = 16 if loss_type == "dr_grpo" else None
    loss_fn = GRPOLoss(loss_type, epsilon=0.02, epsilon_high=0.03, beta=beta, max_completion_length=max_len)
    return model, reference, loss_fn


def _update(model, reference, loss_fn, rollout, *, padding_free, keep_old=False, cap=None):
    """The rollout's micro-batch, then (with old log-probabilities) the adapters moved, then the loss and
    its gradients: the ratio is not 1, so the clip and the ratio's gradient are compared too."""
    batch = rollout_batch(
        rollout, _scores(), loss_fn, policy=model, reference=reference, device=CPU, scale_rewards=True,
        keep_old_logps=keep_old, importance_cap=cap, padding_free=padding_free,
    )  # fmt: skip
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for name, p in model.named_parameters():
            if "lora_b" in name:
                p.add_(2 * torch.randn(p.shape, generator=g))
    hidden = model.hidden(batch.tokens, **batch.model_inputs)
    loss = grpo_loss(loss_fn, model, hidden, batch)
    loss.sum.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return batch, loss, grads


def _assert_same(packed, padded):
    (pb, pl, pg), (qb, ql, qg) = packed, padded
    assert pb.tokens.shape[0] == 1 and qb.tokens.shape[0] == len(COMPLETION_LENGTHS)
    assert pb.tokens.numel() < qb.tokens.numel(), (
        "the packed row computes as many positions as the padded rows"
    )
    assert pl.count == ql.count
    torch.testing.assert_close(pl.sum, ql.sum, rtol=1e-5, atol=1e-7)
    assert pl.metrics.keys() == ql.metrics.keys()
    for name in pl.metrics:
        torch.testing.assert_close(pl.metrics[name].value(), ql.metrics[name].value(), rtol=1e-5, atol=1e-7)
    assert pg.keys() == qg.keys() and pg
    for name in pg:
        torch.testing.assert_close(pg[name], qg[name], rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("reference_kind, beta", [("lora", 0.04), ("frozen", 0.04), ("none", 0.0)])
def test_packed_rollout_gives_the_padded_loss_metrics_and_gradients(loss_type, reference_kind, beta):
    runs = []
    for padding_free in (True, False):
        model, reference, loss_fn = _setup(reference_kind, loss_type, beta)
        runs.append(_update(model, reference, loss_fn, _rollout(), padding_free=padding_free, keep_old=True))
    _assert_same(*runs)
    assert runs[0][1].metrics["clip_ratio/region"].value() > 0, "no token clipped: the clip is not compared"


def test_packed_stale_rollout_gives_the_padded_importance_weighted_update():
    runs = []
    for padding_free in (True, False):
        model, reference, loss_fn = _setup("lora", "dapo", 0.04)
        runs.append(_update(model, reference, loss_fn, _rollout(), padding_free=padding_free, cap=2.0))
    _assert_same(*runs)
    assert runs[0][0].is_weights is not None


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_packed_trajectories_give_the_padded_update(loss_type):
    runs = []
    for padding_free in (True, False):
        model, reference, loss_fn = _setup("lora", loss_type, 0.04)
        runs.append(
            _update(model, reference, loss_fn, _trajectories(), padding_free=padding_free, keep_old=True)
        )
    _assert_same(*runs)


def test_pack_rows_lays_each_rows_real_tokens_end_to_end():
    parts = _trajectories().training_batch()
    packed = pack_rows(parts)
    # A row ends at its last labelled token: row 1's closing environment answer is dropped.
    ends = [len(r.prompt) + len(r.tokens) - (2 if i == 1 else 0) for i, r in enumerate(_trajectories().rows)]
    assert torch.equal(packed["tokens"][0], torch.cat([parts["tokens"][i, :e] for i, e in enumerate(ends)]))
    assert torch.equal(packed["input_pos"][0], torch.cat([torch.arange(e) for e in ends]))
    assert torch.equal(
        packed["document_ids"][0], torch.repeat_interleave(torch.arange(6), torch.tensor(ends))
    )
    batch = RolloutBatch(
        packed["tokens"], packed["labels"], packed["input_pos"], packed["document_ids"],
        advantages=torch.zeros(6), old_logps=None, ref_logps=None, temperature=1.0, metrics={},
    )  # fmt: skip
    (labels,) = rows_of(batch, packed["labels"])  # back at each row's positions, -100 around
    width = max(ends)
    assert torch.equal(labels, parts["labels"][:, :width])


def test_a_packed_rollout_batch_survives_its_saved_state():
    model, reference, loss_fn = _setup("lora", "grpo", 0.04)
    kw = dict(policy=model, reference=reference, device=CPU, scale_rewards=True, keep_old_logps=True)
    batch = rollout_batch(_rollout(), _scores(), loss_fn, padding_free=True, **kw)
    again = RolloutBatch.from_state(batch.state())
    assert torch.equal(again.input_pos, batch.input_pos) and torch.equal(
        again.document_ids, batch.document_ids
    )


def test_a_batch_with_what_one_row_cannot_carry_is_refused():
    parts = {**_rollout().training_batch(), "pixel_values": torch.zeros(1, 3, 4, 4)}
    with pytest.raises(ValueError, match=r"padding_free: .*\['pixel_values'\].*set padding_free=false"):
        pack_rows(parts)
