"""benchmarks/gpu_run.py's dry run: every recipe family's one-GPU and all-GPU command is a valid config
(checked as `ftune validate` checks it) with a memory plan, without CUDA and without weights."""

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_run  # noqa: E402


def test_dry_run_plans_every_family_on_one_gpu_and_on_all(tmp_path):
    results = tmp_path / "gpu_run.json"
    runs = gpu_run.main(
        ["--dry-run", "--gpus", "4", "--results", str(results), "--output-root", str(tmp_path)]
    )
    assert not torch.cuda.is_initialized(), "the dry run touched CUDA"
    by = {(r.family, r.world_size): r for r in runs}
    assert set(by) == {(f.name, w) for f in gpu_run.FAMILIES for w in (1, 4)}
    for f in gpu_run.FAMILIES:
        one, four = by[f.name, 1], by[f.name, 4]
        assert one.recipe == (f.single or f.distributed) and four.recipe == f.distributed
        assert four.command[2:4] == ["--nproc_per_node", "4"], four.command
        for r in (one, four):
            assert {"device=cuda", "dtype=bf16", f"max_steps={gpu_run.STEPS}"} <= set(r.command), r.command
            assert r.plan_terms_gib and r.plan_peak_gib == pytest.approx(
                sum(r.plan_terms_gib.values()), abs=0.02
            )
            assert r.measured is None
        # FSDP2 shards weights, gradients and optimizer state over the 4 ranks: less a rank.
        assert four.plan_peak_gib < one.plan_peak_gib, (f.name, one.plan_peak_gib, four.plan_peak_gib)
        assert one.plan_terms_gib["weights"] == pytest.approx(4 * four.plan_terms_gib["weights"], rel=0.01)
    # A full fine-tune trains at 3 forwards a position, LoRA at 2: MFU's numerator.
    full, lora = by["full", 1], by["lora", 1]
    assert full.flops_per_token > 6 * 1.2e9 and lora.flops_per_token < full.flops_per_token * 0.7
    written = json.loads(results.read_text())
    assert written["dry_run"] is True and len(written["rows"]) == len(runs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA machine runs it")
def test_a_real_run_without_cuda_says_so():
    with pytest.raises(SystemExit, match="no CUDA device here.*--dry-run"):
        gpu_run.main(["--families", "lora"])
