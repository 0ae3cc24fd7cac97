"""What FSDP2's sharded parameters can step (ftune/training/step/optimizer.py), decided from the config
and checked against real FSDP2 steps at world size 2: a refusal is never wrong, an acceptance never
ends in a traceback at the first step."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ftune.cli.validate import validate
from ftune.config.errors import ConfigError
from ftune.training.step.optimizer import sharded_step_problems

HERE = Path(__file__).resolve().parent

# Every kernel choice of the optimizers a config swaps in most (torch's SGD, Adam, AdamW, Adagrad).
NODES = [
    {"_component_": f"torch.optim.{cls}", "lr": 0.01, **option}
    for cls in ("SGD", "Adam", "AdamW", "Adagrad")
    for option in ({}, {"fused": True}, {"fused": False}, {"foreach": True}, {"foreach": False})
] + [{"_component_": "torch.optim.Rprop", "lr": 0.01, "foreach": True}]


def test_sgd_fused_is_refused_naming_the_option_and_the_fix():
    (problem,) = sharded_step_problems({"_component_": "torch.optim.SGD", "lr": 0.1, "fused": True})
    assert problem.startswith("optimizer.fused: true with torch.optim.SGD: its step calls aten._fused_sgd_")
    assert "~optimizer.fused" in problem and "optimizer.fused=false" in problem


def test_an_optimizer_that_never_shards_is_blamed_itself():
    node = {"_component_": "torch.optim.Rprop", "lr": 0.1, "foreach": True}
    (problem,) = sharded_step_problems(node)
    assert "aten._foreach_copy_" in problem and "~optimizer.foreach" in problem


@pytest.mark.parametrize("option", [{}, {"fused": True}, {"fused": False}, {"foreach": True}])
def test_adamw_is_accepted_whatever_its_kernel(option):
    assert sharded_step_problems({"_component_": "torch.optim.AdamW", "lr": 0.1, **option}) == []


@pytest.mark.distributed
def test_the_verdict_is_what_fsdp2_does(tmp_path):
    """Each node's verdict equals what one FSDP2 step at world size 2 does with it."""
    out = tmp_path / "results.json"
    texts = [json.dumps(n) for n in NODES]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += [str(HERE / "sharded_optimizer_driver.py"), str(out), *texts]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[1])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert out.exists(), f"driver failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    real = json.loads(out.read_text())
    for node, text in zip(NODES, texts):
        refused = bool(sharded_step_problems(node))
        assert refused == (real[text] != "ok"), f"{text}: refused={refused}, FSDP2 step: {real[text]}"
    assert sum(r != "ok" for r in real.values()) >= 3  # SGD fused, Adagrad fused, Rprop foreach


def _distributed_recipes():
    from ftune import registry

    return [(r.name, r.default_config) for r in registry.TRAINING.values() if r.distributed]


@pytest.mark.parametrize("recipe, config", _distributed_recipes())
def test_every_distributed_recipe_refuses_fused_sgd_before_the_run(recipe, config):
    with pytest.raises(ConfigError, match=r"optimizer\.fused: true .* ~optimizer\.fused"):
        validate(
            config, ["optimizer._component_=torch.optim.SGD", "optimizer.fused=true"], recipe, files=False
        )
    for optimizer in (
        "optimizer={_component_: torch.optim.SGD, lr: 0.01}",
        "optimizer={_component_: torch.optim.AdamW, lr: 0.01, fused: true}",
        "optimizer={_component_: torch.optim.AdamW, lr: 0.01, fused: false}",
    ):
        assert validate(config, [optimizer], recipe, files=False) == recipe
