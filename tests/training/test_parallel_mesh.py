"""Tensor and context parallel composed with FSDP2 on one 2-D mesh (ftune/runtime/mesh.py,
ftune/training/features/tensor_parallel.py and context_parallel.py): the losses and the weights after
three SGD steps equal one device's, and every mutant (a wrong shard, a missing exchange, local
positions) is caught.

Measured (tiny decoder, fp32, gloo, sequence 15 so that context parallel pads, gradients clipped to
0.5): the losses within 2.1e-7 relative at tp=2, cp=2 (plain and packed rows) and dp=2 x tp=2 or
cp=2; the weights within 2.5e-7 of each tensor's largest magnitude (the reductions' order). The
checks allow 1e-6 and 2e-6; the mutants move the weights by 0.3-0.5 and the losses by 1e-2 (or break
the run).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from parallel_driver import batches, steps, tiny_model  # noqa: E402
from parallel_mutants import CP_MUTANTS, TP_MUTANTS  # noqa: E402

pytestmark = pytest.mark.distributed

LOSS_RTOL, WEIGHT_RTOL = 1e-6, 2e-6


@pytest.fixture(scope="module")
def one_device():
    model = tiny_model()
    losses = steps(model, batches())
    return {"losses": losses, "weights": model.state_dict()}


@pytest.fixture(scope="module")
def one_device_packed():
    """Rows of three documents each, with their per-document mask and positions."""
    model = tiny_model()
    losses = steps(model, batches(packed=True))
    return {"losses": losses, "weights": model.state_dict()}


def launch(tmp_path: Path, world_size: int, *cases: str) -> dict:
    out = tmp_path / "results.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(world_size)]
    cmd += [str(HERE / "parallel_driver.py"), str(out), *cases]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[1])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert out.exists(), f"driver failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return torch.load(out)


def differences(run, one_device) -> tuple[float, float]:
    """The largest relative difference of the losses, and of the weights (to each tensor's largest magnitude)."""
    losses = max(abs(a - b) / abs(b) for a, b in zip(run["losses"], one_device["losses"], strict=True))
    weights = max(
        ((run["weights"][k] - v).abs().max() / v.abs().max()).item() for k, v in one_device["weights"].items()
    )
    return losses, weights


def assert_equal_to_one_device(run, one_device) -> None:
    assert not isinstance(run, str), run
    losses, weights = differences(run, one_device)
    assert losses <= LOSS_RTOL and weights <= WEIGHT_RTOL, (losses, weights)


def test_tp2_and_cp2_equal_one_device(tmp_path, one_device, one_device_packed):
    results = launch(tmp_path, 2, "tp2", "cp2", "cp2:packed")
    for case in ("tp2", "cp2"):
        assert_equal_to_one_device(results[case], one_device)
    assert_equal_to_one_device(results["cp2:packed"], one_device_packed)


@pytest.mark.matrix
def test_dp2_x_tp2_and_dp2_x_cp2_equal_one_device_with_and_without_checkpointing(
    tmp_path, one_device, one_device_packed
):
    results = launch(tmp_path, 4, "tp2", "cp2", "cp2:packed", "tp2:ac", "cp2:packed:ac")  # ac: checkpointed
    for case in ("tp2", "cp2", "tp2:ac"):
        assert_equal_to_one_device(results[case], one_device)
    for case in ("cp2:packed", "cp2:packed:ac"):
        assert_equal_to_one_device(results[case], one_device_packed)


@pytest.mark.matrix
def test_every_mutant_is_caught(tmp_path, one_device):
    cases = [f"tp2@{m}" for m in TP_MUTANTS] + [f"cp2@{m}" for m in CP_MUTANTS]
    results = launch(tmp_path, 2, *cases)
    for case in cases:
        run = results[case]
        if isinstance(run, str):
            continue  # the mutant broke the run: caught
        losses, weights = differences(run, one_device)
        assert losses > LOSS_RTOL or weights > WEIGHT_RTOL, f"{case} survived: {losses}, {weights}"
