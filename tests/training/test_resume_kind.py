"""A step folder records the recipe that wrote it; a resume by another kind of run is refused by name."""

import logging
import sys

import pytest
import torch

from ftune.training.run.resume import restore, snapshot


class _Loader:
    def __init__(self):
        self.state = None

    def load_state_dict(self, state):
        self.state = state


def _state(optimizer, **kind):
    return {**kind, "step": 3, "optimizer": optimizer.state_dict(), "rng": None, "dataloader": {"epoch": 0}}


@pytest.fixture
def as_recipe(monkeypatch):
    def set_name(name):
        monkeypatch.setattr(sys, "argv", [f"/somewhere/{name}.py"])

    return set_name


def _restore(state, optimizer, model):
    return restore(state, model=model, optimizer=optimizer, scheduler=None, loader=_Loader())


def test_a_dpo_run_refuses_an_sft_step_folder(as_recipe, monkeypatch):
    monkeypatch.setattr("ftune.training.run.resume._restore_rng", lambda saved: None)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    sft = _state(optimizer, ftune_recipe="lora_finetune_single_device", ftune_recipe_kind="supervised")
    as_recipe("lora_dpo_single_device")
    with pytest.raises(
        ValueError, match=r"written by lora_finetune_single_device, a supervised run, and lora_dpo"
    ):
        _restore(sft, optimizer, model)
    as_recipe("qat_single_device")  # another supervised recipe: the same kind of run
    assert _restore(sft, optimizer, model) == 3


def test_a_folder_without_a_recorded_kind_is_a_logged_migration(as_recipe, monkeypatch, caplog):
    monkeypatch.setattr("ftune.training.run.resume._restore_rng", lambda saved: None)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    as_recipe("full_finetune_single_device")
    with caplog.at_level(logging.WARNING, logger="ftune.training.run.resume"):
        assert _restore(_state(optimizer), optimizer, model) == 3
    assert "Migration 'recipe-kind-unrecorded'" in caplog.text
    assert "taken to be full_finetune_single_device's own (supervised)" in caplog.text


def test_an_optimizer_state_of_other_parameters_is_named_before_torch_fails(monkeypatch):
    monkeypatch.setattr("ftune.training.run.resume._restore_rng", lambda saved: None)
    lora = torch.nn.Linear(2, 2)
    saved = _state(torch.optim.AdamW([lora.weight]), ftune_recipe="x", ftune_recipe_kind=None)
    full = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    with pytest.raises(
        ValueError, match=r"covers 1 parameter tensor\(s\) in groups \[1\], and this run trains 4 in"
    ):
        _restore(saved, torch.optim.AdamW(full.parameters()), full)


def test_snapshot_records_the_recipe_first(as_recipe):
    class Loader:
        def state_dict(self):
            return {"epoch": 0}

    as_recipe("lora_dpo_single_device")
    model = torch.nn.Linear(2, 2)
    state = snapshot(
        1, model=model, optimizer=torch.optim.SGD(model.parameters()), scheduler=None, loader=Loader()
    )
    assert list(state)[:2] == ["ftune_recipe", "ftune_recipe_kind"]
    assert (state["ftune_recipe"], state["ftune_recipe_kind"]) == ("lora_dpo_single_device", "preference")
