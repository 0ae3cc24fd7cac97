"""Packed DPO (issue 43): pairs laid end to end in one row (ftune.data.padding_free_collate_preference)
give the right-padded batch's log-probabilities, losses, metrics and gradients, with a LoRA reference
(the policy with its adapters off) and with a frozen one; KTO and ORPO refuse a packed batch."""

import copy

import pytest
import torch

from ftune.data import padded_collate_preference, padding_free_collate_preference
from ftune.models.smollm2 import smollm2
from ftune.peft import apply_lora
from ftune.training import DPOLoss, KTOLoss, ReferenceModel, on_device, per_pair, preference_loss

CPU = torch.device("cpu")


def _model():
    torch.manual_seed(0)
    model = smollm2(
        vocab_size=64,
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


def _pairs(n=3, seed=5):
    """Pairs with prompts and answers of different lengths (the padded batch pads every row)."""
    g = torch.Generator().manual_seed(seed)
    items = []
    for i in range(n):
        prompt = torch.randint(0, 64, (3 + i,), generator=g).tolist()
        chosen = torch.randint(0, 64, (2 + 2 * i,), generator=g).tolist()
        rejected = torch.randint(0, 64, (5 - i,), generator=g).tolist()
        items.append({
            "chosen_tokens": prompt + chosen, "chosen_labels": [-100] * len(prompt) + chosen,
            "rejected_tokens": prompt + rejected, "rejected_labels": [-100] * len(prompt) + rejected,
        })  # fmt: skip
    return items


def _loss(model, loss_fn, reference, collated):
    batch = on_device(collated, CPU)
    ref = reference.row_logps(loss_fn, batch) if reference is not None else None
    hidden = model.hidden(batch.tokens, input_pos=batch.input_pos, mask=batch.mask)
    return preference_loss(loss_fn, model, hidden, batch, ref), batch


def test_the_packed_row_holds_the_padded_rows_end_to_end():
    items = _pairs()
    packed = padding_free_collate_preference(items)
    padded = padded_collate_preference(items, pad_id=0)
    lengths = [len(x["chosen_tokens"]) for x in items] + [len(x["rejected_tokens"]) for x in items]
    assert packed["tokens"].shape == (1, sum(lengths)) and padded["tokens"].shape == (6, max(lengths))
    docs = torch.repeat_interleave(torch.arange(6), torch.tensor(lengths))
    assert torch.equal(packed["document_ids"][0], docs)
    rows = [padded["tokens"][i, :n] for i, n in enumerate(lengths)]
    assert torch.equal(packed["tokens"][0], torch.cat(rows))
    assert per_pair(on_device(packed, CPU)) == 3 == per_pair(on_device(padded, CPU))


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "simpo"])
@pytest.mark.parametrize("reference_kind", ["lora", "frozen"])
def test_packed_pairs_give_the_padded_losses_metrics_and_gradients(loss_type, reference_kind):
    model = _model()
    frozen = copy.deepcopy(model)
    apply_lora(model, targets=["q_proj", "v_proj"], rank=4, alpha=8)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_b" in name:
                p.normal_(0, 0.3)  # trained adapters: the policy is not the reference
    kw = {"gamma": 0.5} if loss_type == "simpo" else {}
    loss_fn = DPOLoss(loss_type, beta=0.1, num_chunks=2, **kw)
    reference = None
    if loss_fn.needs_reference:
        reference = (
            ReferenceModel.adapters_off(model) if reference_kind == "lora" else ReferenceModel.frozen(frozen)
        )
    items = _pairs()
    results = []
    for collated in (padded_collate_preference(items, pad_id=0), padding_free_collate_preference(items)):
        model.zero_grad(set_to_none=True)
        loss, _ = _loss(model, loss_fn, reference, collated)
        loss.sum.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((loss, grads))
    (padded, padded_grads), (packed, packed_grads) = results
    assert packed.count == padded.count == 3
    torch.testing.assert_close(packed.sum, padded.sum, rtol=1e-5, atol=1e-6)
    assert set(packed.metrics) == set(padded.metrics)
    for name, metric in padded.metrics.items():
        assert packed.metrics[name].value() == pytest.approx(metric.value(), rel=1e-5, abs=1e-6), name
    assert padded_grads and set(packed_grads) == set(padded_grads)
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-5, atol=1e-6)


def test_documents_out_of_order_are_refused():
    items = _pairs()
    packed = padding_free_collate_preference(items)
    packed["document_ids"] = packed["document_ids"].flip(1)  # numbered 5, 4, ...: not the collate's layout
    loss_fn = DPOLoss("simpo", beta=0.1, gamma=0.5)
    with pytest.raises(ValueError, match=r"numbered 0, 1, 2, \.\.\. in order"):
        _loss(_model(), loss_fn, None, packed)


@pytest.mark.parametrize(
    "loss_fn, name", [(DPOLoss("orpo", beta=0.1), 'DPOLoss\\("orpo"\\)'), (KTOLoss(beta=0.1), "KTOLoss")]
)
def test_orpo_and_kto_refuse_a_packed_batch_saying_the_fix(loss_fn, name):
    packed = padding_free_collate_preference(_pairs())
    with pytest.raises(
        ValueError, match=rf"collate_fn: {name} scores rows of a padded batch.*collate_fn=null"
    ):
        _loss(_model(), loss_fn, None, packed)
