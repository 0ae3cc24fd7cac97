"""DPO, GRPO and KD on tiny Qwen3-MoE, Mixtral and Gemma 2 at world size 2 (FSDP2, gloo) equal one device.

The balancing loss is a per-forward statistic, so both runs make the same forwards: each rank's
micro-batch of 1 sample (a pair, a prompt's group, a sequence) is one micro-batch of the one-device
run at grad_accum_steps=2 (the sampler gives rank r the step's r-th sample). Then every step's
logged loss, grad_norm and (MoE) aux_loss are equal within REL.

One torchrun launch runs every selected case in one process group (a launch costs ~30 s of start-up
on 2 busy cores). The default suite runs one method a family (DEFAULT); `-m matrix` adds the other
four of each.

This file is also the torchrun driver: `python -m torch.distributed.run --nproc_per_node 2
tests/recipes/test_methods_on_moe_and_gemma2_distributed.py <root> <family>:<method>...`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "assets")]

from conftest import load_recipe  # noqa: E402
from family_methods import (  # noqa: E402
    DISTRIBUTED,
    FAMILIES,
    METHODS,
    MOE,
    SINGLE,
    config_of,
    make_folders,
    overrides,
    write_data,
)
from run_logs import read_log  # noqa: E402

from ftune.config import load_config  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.usefixtures("one_thread")]
# Measured over all 15 (family, method) runs: the largest relative difference of a figure was 2.2e-6
# (Gemma 2 full GRPO's step-2 loss, 3e-3), every other one at most 5.4e-7: the ranks' sums are
# reduced in another order. ABS: a GRPO loss of a dense model is ~0 at step 1 (ratio 1, advantages
# summing to 0), ~1e-8 of rounding on either side.
REL, ABS = 1e-5, 1e-7
PER_RANK = ["batch_size=1"]
# The one case a family of the default suite: GRPO on Qwen3-MoE (what MoE users run GRPO on), full
# DPO on Mixtral (its frozen reference sharded like the policy), KD on Gemma 2 (two capped heads).
DEFAULT = {"qwen3_moe": "lora_grpo", "mixtral": "full_dpo", "gemma2": "kd"}
CASES = [
    pytest.param(family, method, marks=() if DEFAULT[family] == method else pytest.mark.matrix)
    for family in FAMILIES
    for method in METHODS
]


def figures(out: Path, family: str) -> list[float]:
    keys = ("loss", "grad_norm", *(("aux_loss",) if family in MOE else ()))
    return [row[key] for row in read_log(out) if "loss" in row for key in keys]


def _selected(request) -> list[tuple[str, str]]:
    """The (family, method) cases whose test this session runs."""
    return [
        (item.callspec.params["family"], item.callspec.params["method"])
        for item in request.session.items
        if item.originalname == "test_world_size_2_equals_one_device"
        and Path(item.path).resolve() == Path(__file__).resolve()
    ]


@pytest.fixture(scope="module")
def launched(tmp_path_factory, request):
    """(results, root): the selected families' folders built and one driver launched for every case."""
    root = tmp_path_factory.mktemp("families_dist")
    write_data(root / "data")
    cases = _selected(request)
    for family in dict.fromkeys(family for family, _ in cases):
        make_folders(family, root)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += [__file__, str(root), *(f"{family}:{method}" for family, method in cases)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[1])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, env=env)
    results = root / "runs" / "results.json"
    assert results.exists(), f"driver failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(results.read_text()), root


@pytest.mark.parametrize("family, method", CASES)
def test_world_size_2_equals_one_device(family, method, launched):
    results, root = launched
    case = f"{family}:{method}"
    assert results.get(case) == "ok", results.get(case, "not run")
    one, two = root / "runs" / f"{family}_{method}_one", root / "runs" / f"{family}_{method}"
    cfg = load_config(
        config_of(family, method), [*overrides(family, method, root, one), *PER_RANK, "grad_accum_steps=2"]
    )
    load_recipe(SINGLE[method]).main(cfg)
    want, got = figures(one, family), figures(two, family)
    assert len(want) == len(got) == 2 * (3 if family in MOE else 2)
    assert got == pytest.approx(want, rel=REL, abs=ABS)


def main() -> None:
    import torch.distributed as dist

    root, *cases = sys.argv[1:]
    root = Path(root)
    (root / "runs").mkdir(exist_ok=True)
    # Made here, so that each recipe's destroy_distributed leaves it for the next case.
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    results = {}
    for case in cases:
        family, method = case.split(":")
        out = root / "runs" / f"{family}_{method}"
        try:
            cfg = load_config(config_of(family, method), [*overrides(family, method, root, out), *PER_RANK])
            dist.barrier()
            load_recipe(DISTRIBUTED[method]).main(cfg)
            results[case] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test, which fails with it
            results[case] = traceback.format_exc(limit=6)
        dist.barrier()
    if dist.get_rank() == 0:
        (root / "runs" / "results.json").write_text(json.dumps(results, indent=2))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
