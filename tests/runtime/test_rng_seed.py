import random

import numpy as np
import pytest
import torch

from ftune.runtime.seed import get_rng_state, seed_everything, set_rng_state


def _draw() -> tuple:
    return random.random(), float(np.random.rand()), float(np.random.randn()), torch.rand(3).tolist()


def test_seed_everything_is_reproducible():
    seed_everything(7)
    first = _draw()
    seed_everything(7)
    assert _draw() == first
    seed_everything(8)
    assert _draw() != first


def test_rng_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    seed_everything(3)
    np.random.randn()  # leave numpy with a cached gaussian
    state = get_rng_state()
    expected = _draw()
    torch.save(state, tmp_path / "rng.pt")
    _draw()
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert _draw() == expected


def test_errors():
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 4294967295\], got -1"):
        seed_everything(-1)
    with pytest.raises(ValueError, match="got 1.5"):
        seed_everything(1.5)
    with pytest.raises(KeyError, match=r"RNG state is missing \['python', 'numpy'\]; it has \['torch'\]"):
        set_rng_state({"torch": torch.get_rng_state()})
