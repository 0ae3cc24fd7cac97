"""DCP sharded save/load without a process group, and the FSDP2 full-state-dict gather (world size 1)."""

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from ftune.checkpointing.dcp import full_state_dict, load_sharded, save_sharded


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _train_step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    model(torch.randn(3, 8)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()


def test_save_load_sharded_single_process_model_and_optimizer(tmp_path: Path) -> None:
    assert not dist.is_initialized()
    model = _model(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _train_step(model, opt)
    save_sharded(tmp_path / "dcp", model, opt)

    other = _model(1)
    other_opt = torch.optim.AdamW(other.parameters(), lr=1e-2)
    load_sharded(tmp_path / "dcp", other, other_opt)  # optimizer without state yet: DCP initialises it
    for k, v in model.state_dict().items():
        assert torch.equal(other.state_dict()[k], v), k
    for idx, st in opt.state_dict()["state"].items():
        for name, v in st.items():
            assert torch.equal(other_opt.state_dict()["state"][idx][name], v), (idx, name)
    # The restored pair trains on exactly like the original.
    torch.manual_seed(5)
    _train_step(model, opt)
    torch.manual_seed(5)
    _train_step(other, other_opt)
    for k, v in model.state_dict().items():
        assert torch.equal(other.state_dict()[k], v), k


def test_save_load_sharded_model_only(tmp_path: Path) -> None:
    model, other = _model(0), _model(1)
    save_sharded(tmp_path / "m", model)
    load_sharded(tmp_path / "m", other)
    assert all(torch.equal(other.state_dict()[k], v) for k, v in model.state_dict().items())


def test_load_sharded_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"'.*nope' is not a complete DCP checkpoint \(no .metadata file\)"
    ):
        load_sharded(tmp_path / "nope", _model(0))


def test_full_state_dict_gathers_fsdp2_model(tmp_path: Path) -> None:
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        reference = _model(0)
        sharded = _model(0)
        for layer in sharded:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(sharded)
        full = full_state_dict(sharded)
        assert full.keys() == reference.state_dict().keys()
        for k, v in reference.state_dict().items():
            assert type(full[k]) is torch.Tensor and full[k].device.type == "cpu", k
            assert torch.equal(full[k], v), k
    finally:
        dist.destroy_process_group()
