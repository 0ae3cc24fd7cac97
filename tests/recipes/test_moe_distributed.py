"""A tiny Qwen3-MoE at world size 2 (FSDP2, gloo) trains as on one device, load-balancing loss included.

The balancing loss is a per-forward statistic (not a sum over tokens), so the two runs must make
the same forwards: each rank's micro-batch of 1 sample is one micro-batch of the one-device run at
grad_accum_steps=2 (the sampler gives rank r the step's r-th sample). Then the logged loss
(mean CE + coef * token-weighted aux) and aux_loss are equal at every step.

This file is also the torchrun driver: `python -m torch.distributed.run --nproc_per_node 2
tests/recipes/test_moe_distributed.py <recipe> <config> <checkpoint> <data_dir> <output_dir> <extra>...`.
"""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "assets")]

from conftest import load_recipe, overrides_for  # noqa: E402
from run_logs import read_log  # noqa: E402
from test_moe_recipes import LORA, make_tiny_moe, moe_overrides  # noqa: E402

from ftune.config import load_config  # noqa: E402

pytestmark = pytest.mark.distributed
STEPS = ["max_steps=3", "lr_scheduler.num_warmup_steps=0", "optimizer.lr=3e-3", "batch_size=1"]
CASES = {  # distributed recipe -> (its one-device sibling, config, extra overrides)
    "full_finetune_distributed": ("full_finetune_single_device", "smollm2/135M_full", []),
    "lora_finetune_distributed": ("lora_finetune_single_device", "smollm2/135M_lora", LORA),
}


def _overrides(config: str, ckpt: Path, data_dir: Path, out: Path, extra: list[str]) -> list[str]:
    return [*overrides_for(config, ckpt, data_dir, out), *moe_overrides(ckpt), *STEPS, *extra]


def _figures(out: Path) -> list[float]:
    """Each step's loss, then its aux_loss."""
    return [row[key] for row in read_log(out) if "loss" in row for key in ("loss", "aux_loss")]


@pytest.fixture(scope="module")
def moe_checkpoint(tiny_checkpoint, tmp_path_factory) -> Path:
    return make_tiny_moe(tmp_path_factory.mktemp("moe") / "ckpt", tiny_checkpoint)


@pytest.mark.parametrize("recipe", CASES)
def test_moe_at_world_size_2_equals_one_device(recipe, moe_checkpoint, tmp_path):
    single, config, extra = CASES[recipe]
    data_dir = tmp_path / "demo"
    one = tmp_path / "one"
    cfg = load_config(
        config, [*_overrides(config, moe_checkpoint, data_dir, one, extra), "grad_accum_steps=2"]
    )
    load_recipe(single).main(cfg)
    two = tmp_path / "two"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += [__file__, recipe, config, str(moe_checkpoint), str(data_dir), str(two), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[1])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    want, got = _figures(one), _figures(two)
    assert len(want) == len(got) == 2 * 3
    assert got == pytest.approx(want, rel=1e-5)
    assert want[-2] < want[0]  # it trains
    assert all(aux > 1.9 for aux in got[1::2])  # logged at world size 2 too (top_k = 2 when balanced)


def main() -> None:
    import torch.distributed as dist

    recipe, config, ckpt, data_dir, out, *extra = sys.argv[1:]
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    cfg = load_config(config, _overrides(config, Path(ckpt), Path(data_dir), Path(out), extra))
    load_recipe(recipe).main(cfg)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
