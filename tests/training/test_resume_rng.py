"""Each rank's RNG state goes back to that rank; a resume at another world size says it will not be exact."""

import logging

import torch

from ftune.runtime.seed import get_rng_state
from ftune.training.run.resume import _restore_rng, _rng_states


def _state_after(draws: int) -> dict:
    torch.manual_seed(0)
    torch.rand(draws)
    return get_rng_state()


def test_one_device_saves_and_restores_one_state():
    saved = _rng_states()
    assert isinstance(saved, dict)
    expected = torch.rand(3)
    _restore_rng(saved)
    assert torch.equal(torch.rand(3), expected)


def test_a_list_of_rank_states_gives_this_rank_its_own_and_warns_on_another_world_size(caplog):
    rank0, rank1 = _state_after(1), _state_after(5)  # ranks that drew different amounts
    torch.set_rng_state(rank0["torch"])
    expected = torch.rand(3)
    with caplog.at_level(logging.WARNING):
        _restore_rng([rank0, rank1])  # this process is rank 0 of a world of one
    assert torch.equal(torch.rand(3), expected)
    assert "RNG states of 2 ranks and this run has 1" in caplog.text
    assert "Resume at world size 2 to continue exactly" in caplog.text
