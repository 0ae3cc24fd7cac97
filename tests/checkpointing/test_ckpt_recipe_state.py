"""recipe_state.pt: weights_only loading of optimizer, scheduler and RNG states."""

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from ftune.checkpointing.recipe_state import (
    check_weights_only_safe,
    load_recipe_state,
    save_recipe_state,
    to_weights_only_safe,
)
from ftune.runtime.seed import get_rng_state, set_rng_state


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), float(np.random.randn()), torch.rand(3)


def test_rng_state_round_trip_continues_every_stream(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    np.random.randn()  # leave a cached gaussian in numpy's state
    save_recipe_state({"rng": get_rng_state()}, tmp_path)
    expected = _draws()
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    set_rng_state(load_recipe_state(tmp_path)["rng"])
    got = _draws()
    assert got[:3] == expected[:3]
    assert torch.equal(got[3], expected[3])


def test_optimizer_and_scheduler_state_load_with_weights_only(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        sched.step()
    state = {
        "step": 2,
        "epoch": 0,
        "optimizer": opt.state_dict(),
        "lr_scheduler": sched.state_dict(),
        "dataloader": to_weights_only_safe({"perm": np.arange(5), "pos": np.int64(3)}),
    }
    save_recipe_state(state, tmp_path)
    back = load_recipe_state(tmp_path)
    assert back["step"] == 2 and back["dataloader"]["pos"] == 3
    assert torch.equal(back["dataloader"]["perm"], torch.arange(5))
    opt2 = torch.optim.AdamW(torch.nn.Linear(4, 3).parameters(), lr=1.0)
    opt2.load_state_dict(back["optimizer"])
    for k, v in opt.state_dict()["state"][0].items():
        assert torch.equal(opt2.state_dict()["state"][0][k], v), k
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert opt2.param_groups[0]["betas"] == (0.9, 0.95)


def test_numpy_value_is_refused_at_save_time(tmp_path: Path) -> None:
    with pytest.raises(
        TypeError, match=r"recipe_state\['dataloader'\]\['perm'\] is a numpy.ndarray.*to_weights_only_safe"
    ):
        save_recipe_state({"dataloader": {"perm": np.arange(3)}}, tmp_path)
    assert not (tmp_path / "recipe_state.pt").exists()


def test_arbitrary_object_is_refused() -> None:
    class Thing:
        pass

    with pytest.raises(TypeError, match=r"recipe_state\['x'\]\[1\] is a .*Thing.*Store its state_dict\(\)"):
        check_weights_only_safe({"x": [1, Thing()]})


def test_missing_recipe_state_is_none(tmp_path: Path) -> None:
    assert load_recipe_state(tmp_path) is None
