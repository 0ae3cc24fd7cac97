"""The primitives on a real (tiny) ftune decoder: RoPE positions, GQA, tied embeddings."""

import copy
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from recipe_step import train_step

from ftune.data.collate import padded_collate_sft, padding_free_collate
from ftune.models.llama3 import llama3
from ftune.training.features.activation_checkpointing import apply_activation_checkpointing
from ftune.training.step.loss import ChunkedCrossEntropyLoss
from ftune.training.step.token_loss import batch_loss

CPU = torch.device("cpu")


def _model(tied: bool = True) -> torch.nn.Module:
    torch.manual_seed(0)
    return llama3(
        vocab_size=96, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32, intermediate_dim=64,
        max_seq_len=64, tie_word_embeddings=tied,
    ).train()  # fmt: skip


def _batch(tokens, labels, **extra):
    return {
        "tokens": torch.tensor(tokens),
        "labels": torch.tensor(labels),
        **{k: torch.tensor(v) for k, v in extra.items()},
    }


def test_chunked_loss_on_hidden_equals_cross_entropy_on_logits():
    model = _model()
    tokens = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    loss_sum, n = batch_loss(
        model, ChunkedCrossEntropyLoss(3), _batch(tokens.tolist(), tokens.tolist()), device=CPU
    )
    logits = model(tokens)  # [b, s, vocab]
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, 96), tokens[:, 1:].reshape(-1), reduction="sum")
    assert n == 2 * 11
    torch.testing.assert_close(loss_sum, expected, rtol=1e-5, atol=1e-5)


def test_packed_row_equals_its_documents():
    model = _model()
    doc_a, doc_b = [3, 17, 42, 8, 91, 5], [60, 2, 33, 7]
    packed = _batch([doc_a + doc_b], [doc_a + doc_b], input_pos=[list(range(6)) + list(range(4))],
                    document_ids=[[0] * 6 + [1] * 4])  # fmt: skip
    loss_fn = ChunkedCrossEntropyLoss(2)
    packed_sum, packed_n = batch_loss(model, loss_fn, packed, device=CPU)
    parts = [batch_loss(model, loss_fn, _batch([d], [d]), device=CPU) for d in (doc_a, doc_b)]
    assert packed_n == sum(n for _, n in parts) == 5 + 3
    torch.testing.assert_close(packed_sum, sum(s for s, _ in parts), rtol=1e-5, atol=1e-5)


def test_padding_free_batch_equals_the_padded_batch():
    """One row of the batch's samples end to end gives the padded batch's loss and gradients."""
    gen = torch.Generator().manual_seed(3)
    items = []
    for n in (9, 4, 13):
        tokens = torch.randint(0, 96, (n,), generator=gen).tolist()
        items.append({"tokens": tokens, "labels": [-100] * (n // 3) + tokens[n // 3 :]})  # prompt masked
    loss_fn = ChunkedCrossEntropyLoss(2)
    results = []
    for collate in (partial(padded_collate_sft, pad_id=0), padding_free_collate):
        model = _model()
        batch = collate(items)
        loss_sum, n = batch_loss(model, loss_fn, batch, device=CPU)
        loss_sum.backward()
        results.append((batch["tokens"].shape, loss_sum, n, [p.grad for p in model.parameters()]))
    (padded_shape, padded, padded_n, padded_grads), (flat_shape, flat, flat_n, flat_grads) = results
    assert padded_shape == (3, 13) and flat_shape == (1, 9 + 4 + 13)  # 13 padding positions fewer
    assert flat_n == padded_n == (9 - 3) + (4 - 1) + (13 - 4)  # each sample's unmasked labels
    torch.testing.assert_close(flat, padded, rtol=1e-5, atol=1e-5)
    for a, b in zip(flat_grads, padded_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("tied", [True, False])
def test_accumulation_and_activation_checkpointing(tied):
    tokens = torch.randint(0, 96, (2, 10), generator=torch.Generator().manual_seed(2)).tolist()
    labels = [tokens[0], [-100] * 8 + tokens[1][8:]]  # 9 and 2 labelled tokens
    model = _model(tied)
    twin = copy.deepcopy(model)
    keys = list(twin.state_dict())
    apply_activation_checkpointing(twin)
    assert list(twin.state_dict()) == keys

    losses = []
    for m, micro in (
        (model, [_batch(tokens, labels)]),
        (twin, [_batch([t], [y]) for t, y in zip(tokens, labels)]),
    ):
        opt = torch.optim.SGD(m.parameters(), lr=1.0)
        losses.append(
            train_step(m, ChunkedCrossEntropyLoss(4), micro, opt, step=1, device=CPU, clip_grad_norm=1e9)
        )
    assert losses[1].num_tokens == losses[0].num_tokens == 11
    assert losses[1].loss == pytest.approx(losses[0].loss, rel=1e-6)
    assert losses[1].grad_norm == pytest.approx(losses[0].grad_norm, rel=1e-5)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)
