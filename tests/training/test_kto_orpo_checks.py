"""ORPO's and KTO's arguments and batches are checked, each refusal saying what to set."""

import pytest
import torch

from ftune.training import DPOLoss, KTOLoss, on_device, preference_loss

TOKENS = torch.arange(1, 25).view(4, 6)


def _batch(kinds=None):
    labels = TOKENS.clone()
    labels[:, :3] = -100
    batch = {"tokens": TOKENS, "labels": labels}
    if kinds is not None:
        batch["row_kinds"] = torch.tensor(kinds)
    return on_device(batch, torch.device("cpu"))


def test_orpo_is_reference_free_and_takes_no_label_smoothing():
    assert not DPOLoss("orpo", beta=0.1).needs_reference
    with pytest.raises(ValueError, match=r"0 for 'hinge', 'ipo' and 'orpo'; got 0.1 with loss_type 'orpo'"):
        DPOLoss("orpo", beta=0.1, label_smoothing=0.1)


@pytest.mark.parametrize("name", ["beta", "desirable_weight", "undesirable_weight"])
@pytest.mark.parametrize("value", [0, -1.0, True])
def test_kto_weights_must_be_positive_numbers(name, value):
    with pytest.raises(
        ValueError, match=rf"loss.{name}: KTOLoss needs a number > 0, got {value!r}; TRL's default"
    ):
        KTOLoss(**{name: value})


def test_a_kto_batch_with_a_dpo_loss_names_the_fix(tiny_model):
    model = tiny_model()
    batch = _batch([1, 0, 2, 2])
    with pytest.raises(
        ValueError, match=r"unpaired KTO records .* but the loss is DPOLoss\('sigmoid'\).*KTOLoss"
    ):
        preference_loss(DPOLoss("sigmoid", beta=0.1), model, model.hidden(batch.tokens), batch, None)


@pytest.mark.parametrize("kinds", [None, [1, 2, 2, 2], [0, 3, 2, 2]], ids=["pairs", "kinds", "unknown-kind"])
def test_a_kto_loss_on_other_batches_names_the_dataset(tiny_model, kinds):
    model = tiny_model()
    batch = _batch(kinds)
    with pytest.raises(
        ValueError,
        match=r"KTOLoss needs unpaired KTO batches from dataset._component_=ftune.datasets.kto_dataset .*; got (a batch without row kinds|4 rows of kinds \[)",
    ):
        preference_loss(KTOLoss(), model, model.hidden(batch.tokens), batch, None)
