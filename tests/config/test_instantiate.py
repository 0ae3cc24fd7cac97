import pytest
import torch
from omegaconf import OmegaConf

from ftune.config import ConfigError, instantiate, resolve


def test_builds_with_positional_runtime_args():
    params = [torch.nn.Parameter(torch.zeros(2))]
    node = OmegaConf.create({"_component_": "torch.optim.SGD", "lr": 0.5})
    opt = instantiate(node, params)
    assert isinstance(opt, torch.optim.SGD)
    assert opt.param_groups[0]["lr"] == 0.5


def test_nested_components_and_lists_are_built_first():
    node = OmegaConf.create(
        {
            "_component_": "ftune_test_targets.concat",
            "parts": [
                {"_component_": "ftune_test_targets.transform", "upper": True},
                {"plain": {"_component_": "ftune_test_targets.Tokenizer", "vocab": 3}},
            ],
        }
    )
    built = instantiate(node)
    assert built[0] == ("transform", True)
    assert built[1]["plain"].vocab == 3


def test_runtime_positional_plus_nested_kwarg():
    tok = object()
    node = {
        "_component_": "ftune_test_targets.dataset",
        "source": "x.json",
        "transform": {"_component_": "ftune_test_targets.transform"},
    }
    ds = instantiate(node, tok)
    assert ds["tokenizer"] is tok and ds["transform"] == ("transform", False)


def test_kwargs_take_precedence():
    node = {"_component_": "ftune_test_targets.tiny_model", "dim": 4}
    assert instantiate(node, dim=16)["dim"] == 16


def test_partial():
    fn = instantiate({"_component_": "ftune_test_targets.collate", "_partial_": True, "pad_id": 10})
    assert fn([1, 2]) == [11, 12]


def test_none_is_none():
    assert instantiate(None) is None


def test_no_component_error():
    with pytest.raises(ConfigError, match=r"expected a mapping with a _component_ key"):
        instantiate(OmegaConf.create({"lr": 1}))


def test_bad_import_names_the_path():
    cfg = OmegaConf.create({"model": {"_component_": "ftune_test_targets.nope"}})
    with pytest.raises(ConfigError, match=r"model._component_: cannot import 'ftune_test_targets.nope'"):
        instantiate(cfg.model)


def test_signature_mismatch_names_the_node():
    cfg = OmegaConf.create({"model": {"_component_": "ftune_test_targets.tiny_model", "dimm": 3}})
    with pytest.raises(ConfigError, match=r"model: ftune_test_targets.tiny_model\(dimm\) does not fit"):
        instantiate(cfg.model)


def test_resolve_errors():
    with pytest.raises(ImportError, match=r"no module named 'nonexistent_pkg_xyz'"):
        resolve("nonexistent_pkg_xyz.thing")
    with pytest.raises(ImportError, match=r"module 'torch.optim' has no attribute 'Adamm'"):
        resolve("torch.optim.Adamm")
