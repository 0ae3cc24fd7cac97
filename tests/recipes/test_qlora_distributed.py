"""QLoRA under FSDP2: lora_finetune_distributed with peft.quantize_base=true at world size 2 on CPU (gloo).

Each rank holds its rows of every NF4 base weight (4-bit codes, block scales, scale-group factors) and
FSDP2 gathers them before each layer; the adapters train. Checked here against lora_finetune_single_device
with quantize_base=true on the same global batch: losses and gradient norms at every step, the adapters
saved, an exact resume, and the adapter folder's format (peft loads it). Two mutants of the sharding
(a rank holding the wrong rows; shards never gathered) must fail the world-size-2 comparison.

This file is also the torchrun driver of its world-size-2 runs (one launch, every case):

    torchrun --nproc_per_node 2 test_qlora_distributed.py <workdir> <checkpoint> <data dir>
"""

import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import torch
from conftest import load_recipe, overrides_for  # tests/recipes/conftest.py (puts tests/assets on the path)
from run_logs import _column, _weights, losses, read_log

from ftune.config import load_config

pytestmark = pytest.mark.distributed

HERE = Path(__file__).resolve()
CONFIG = "smollm2/135M_qlora"
STEPS = 4
# World size 2 against one device, measured (4 steps, 1 thread): losses differ by at most 1.0e-7
# relative and gradient norms by 8e-8 (the reduce-scatter sums in another order); the adapters by
# 1.3e-6 absolute (values up to 0.13): Adam's normalised step magnifies tiny gradient differences.
RTOL = 1e-5
ADAPTER_ATOL = 1e-5
MUTANTS = ("wrong_rows_on_rank_1", "shards_not_gathered")


def assert_same_run(got: list[dict], single: list[dict]) -> None:
    """Losses and gradient norms of a world-size-2 run equal the one-device run's within RTOL."""
    assert len(losses(got)) == len(losses(single)) == STEPS
    assert losses(got) == pytest.approx(losses(single), rel=RTOL), "losses differ from one device"
    assert _column(got, "grad_norm") == pytest.approx(_column(single, "grad_norm"), rel=RTOL), "grad norms"


# --- the world-size-2 side (runs under torchrun) -------------------------------------------------


def _nf4_params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    from ftune.peft.nf4 import is_nf4

    return {n: p for n, p in model.named_parameters() if is_nf4(p)}


def _check_shards(model: torch.nn.Module, checkpoint: Path) -> None:
    """Each rank holds its rows of the single-device NF4 weights, and a full state dict gathers them dense."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from ftune.checkpointing import load_hf
    from ftune.checkpointing.dcp import full_state_dict
    from ftune.peft.nf4 import dequantize, to_nf4_parameter

    rank, ranks = dist.get_rank(), dist.get_world_size()
    dense = load_hf(checkpoint).state_dict()
    nf4 = _nf4_params(model)
    assert len(nf4) == 14, f"NF4 weights: {sorted(nf4)}"  # 7 targets x 2 layers
    for name, p in nf4.items():
        assert isinstance(p, DTensor), f"{name} is not sharded"
        local, whole = p._local_tensor, to_nf4_parameter(dense[name])
        for attr in ("quantized_data", "quantized_scalers", "quantization_factor"):
            mine, ref = getattr(local, attr), getattr(whole, attr)
            assert mine.numel() * ranks == ref.numel(), f"{name}.{attr}: {mine.numel()} of {ref.numel()}"
            assert torch.equal(mine, ref.chunk(ranks)[rank]), f"{name}.{attr}: not rank {rank}'s rows"
    state = full_state_dict(model)
    if rank == 0:
        for name in nf4:
            assert type(state[name]) is torch.Tensor, f"{name}: {type(state[name])}"
            assert torch.equal(state[name], dequantize(to_nf4_parameter(dense[name])))


def _wrong_rows(mp) -> None:
    """Mutant: after sharding, rank 1's NF4 shards are overwritten with rank 0's rows."""
    import torch.distributed as dist

    from ftune import training

    real = training.shard_model

    def shard_model(model, *args, **kwargs):
        real(model, *args, **kwargs)
        for p in _nf4_params(model).values():
            for attr in ("quantized_data", "quantized_scalers", "quantization_factor"):
                dist.broadcast(getattr(p._local_tensor, attr), src=0)
        return model

    mp.setattr(training, "shard_model", shard_model)


def _not_gathered(mp) -> None:
    """Mutant: each rank's gathered NF4 weight is its own shard repeated (the all-gather's result unused)."""
    from ftune.peft.nf4 import _nf4_module

    nf4_type = _nf4_module().NF4Tensor
    real = nf4_type.fsdp_post_all_gather

    def post_all_gather(self, outputs, metadata, param_dtype, *, out=None):
        mine = (self.quantized_scalers, self.quantization_factor, self.quantized_data)
        with torch.no_grad():
            for gathered, local in zip(outputs, mine):
                gathered.copy_(local.repeat(gathered.numel() // local.numel()))
        return real(self, outputs, metadata, param_dtype, out=out)

    mp.setattr(nf4_type, "fsdp_post_all_gather", post_all_gather)


def drive(workdir: Path, checkpoint: Path, data: Path) -> None:
    """Every world-size-2 case in one process group; {case: "ok" | traceback} in workdir/results.json."""
    from datetime import timedelta

    import torch.distributed as dist
    from spies import models_run

    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    module = load_recipe("lora_finetune_distributed")

    def run(*overrides, output_dir):
        base = overrides_for(CONFIG, checkpoint, data, output_dir)
        dist.barrier()
        module.main(load_config(CONFIG, [*base, "batch_size=2", f"max_steps={STEPS}", *overrides]))
        dist.barrier()

    def straight():  # 4 steps, step folders at 2 and 4; the model's shards checked after the run
        with models_run() as models:
            run("save_every_n_steps=2", output_dir=workdir / "ws2")
        _check_shards(models[-1], checkpoint)

    def resume():  # from the straight run's step 2, in a fresh output folder
        if dist.get_rank() == 0:
            shutil.copytree(workdir / "ws2" / "step_2", workdir / "resumed" / "step_2")
        run("checkpointer.resume_from_checkpoint=auto", output_dir=workdir / "resumed")

    def mutant(name):
        def case():
            with pytest.MonkeyPatch.context() as mp:
                {"wrong_rows_on_rank_1": _wrong_rows, "shards_not_gathered": _not_gathered}[name](mp)
                run(output_dir=workdir / name)

        return case

    results = {}
    for case, fn in [("ws2", straight), ("resume", resume), *((m, mutant(m)) for m in MUTANTS)]:
        try:
            fn()
            results[case] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test, which fails with it
            results[case] = traceback.format_exc(limit=8)
        dist.barrier()
    if dist.get_rank() == 0:
        (workdir / "results.json").write_text(json.dumps(results, indent=2))
    dist.destroy_process_group()


# --- the tests -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def launched(tiny_checkpoint, demo_dir, tmp_path_factory):
    """The world-size-2 runs (one torchrun launch): (results, workdir)."""
    workdir = tmp_path_factory.mktemp("qlora_ws2")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(HERE)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[2])}
    proc = subprocess.run(
        [*cmd, str(workdir), str(tiny_checkpoint), str(demo_dir)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    results = workdir / "results.json"
    assert results.exists(), f"driver failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(results.read_text()), workdir


@pytest.fixture(scope="module")
def single(tiny_checkpoint, demo_dir, tmp_path_factory):
    """lora_finetune_single_device with quantize_base=true, the same global batch: (logs, output_dir)."""
    out = tmp_path_factory.mktemp("qlora_one_device")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = load_config(
            CONFIG,
            [
                *overrides_for(CONFIG, tiny_checkpoint, demo_dir, out),
                f"max_steps={STEPS}",
                "save_every_n_steps=2",
            ],
        )
        load_recipe("lora_finetune_single_device").main(cfg)
    finally:
        torch.set_num_threads(threads)
    return read_log(out), out


def test_nf4_shards_are_each_ranks_rows_and_gather_dense(launched):
    results, _ = launched
    assert results["ws2"] == "ok", results["ws2"]


def test_world_size_2_equals_one_device(launched, single):
    results, workdir = launched
    assert results["ws2"] == "ok", results["ws2"]
    assert_same_run(read_log(workdir / "ws2"), single[0])
    ours, theirs = _weights(workdir / "ws2" / f"step_{STEPS}"), _weights(single[1] / f"step_{STEPS}")
    assert ours.keys() == theirs.keys()
    for key in ours:
        torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=ADAPTER_ATOL, msg=key)
    assert any(v.abs().sum() > 0 for k, v in ours.items() if "lora_B" in k), "the adapters did not train"


@pytest.mark.parametrize("mutant", MUTANTS)
def test_a_broken_sharding_fails_the_comparison(launched, single, mutant):
    """The comparison above is not blind: a rank with the wrong rows, or shards used ungathered, fail it."""
    results, workdir = launched
    assert results[mutant] == "ok", results[mutant]
    with pytest.raises(AssertionError, match="losses differ from one device"):
        assert_same_run(read_log(workdir / mutant), single[0])


def test_resume_is_exact(launched):
    results, workdir = launched
    assert results["resume"] == "ok", results["resume"]
    straight, resumed = read_log(workdir / "ws2"), read_log(workdir / "resumed")
    assert [r["step"] for r in resumed if "loss" in r] == [3, 4]
    assert losses(resumed) == losses(straight)[2:]
    a, b = _weights(workdir / "ws2" / f"step_{STEPS}"), _weights(workdir / "resumed" / f"step_{STEPS}")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "adapters differ after resume"


def test_adapter_folder_is_single_device_format_and_loads_in_peft(launched, single, tiny_checkpoint):
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    results, workdir = launched
    assert results["ws2"] == "ok", results["ws2"]
    ours, theirs = workdir / "ws2" / f"step_{STEPS}", single[1] / f"step_{STEPS}"
    adapter_files = {"adapter_model.safetensors", "adapter_config.json"}
    assert adapter_files <= {p.name for p in ours.iterdir()}
    assert {p.name for p in ours.iterdir()} == {p.name for p in theirs.iterdir()}
    config = json.loads((ours / "adapter_config.json").read_text())
    assert config == json.loads((theirs / "adapter_config.json").read_text())
    saved, reference = _weights(ours), _weights(theirs)
    assert {k: (v.shape, v.dtype) for k, v in saved.items()} == {
        k: (v.shape, v.dtype) for k, v in reference.items()
    }
    base = transformers.AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    loaded = peft.get_peft_model_state_dict(peft.PeftModel.from_pretrained(base, ours))
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)


def test_world_of_one_equals_one_device(single, tiny_checkpoint, demo_dir, tmp_path):
    """`ftune run lora_finetune_distributed` without torchrun: a world of one, the NF4 weights left unsharded."""
    out = tmp_path / "one"
    cfg = load_config(CONFIG, [*overrides_for(CONFIG, tiny_checkpoint, demo_dir, out), f"max_steps={STEPS}"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        load_recipe("lora_finetune_distributed").main(cfg)
    finally:
        torch.set_num_threads(threads)
    assert_same_run(read_log(out), single[0])


def test_weights_that_cannot_shard_are_refused_with_the_reason():
    from tiny_checkpoint import SIZES

    from ftune.models.smollm2 import smollm2
    from ftune.peft import apply_lora
    from ftune.training.features.fsdp import _check_nf4_shardable

    model = smollm2(**SIZES, max_seq_len=64)
    apply_lora(model, targets=["q_proj", "k_proj"], rank=2, alpha=4.0, quantize_base=True)
    _check_nf4_shardable(model, 8, None)  # 64 or 32 rows, 8 groups of scales each
    with pytest.raises(
        ValueError, match=r"over 3 ranks: layers.0.attn.q_proj.weight \(shape \(64, 64\)\) has 64 rows"
    ):
        _check_nf4_shardable(model, 3, None)
    with pytest.raises(ValueError, match=r"over 16 ranks: .* has 64 rows and 8 groups of block scales"):
        _check_nf4_shardable(model, 16, None)
    with pytest.raises(ValueError, match=r"with param_dtype=torch.bfloat16: torchao's NF4 all-gather keeps"):
        _check_nf4_shardable(model, 2, torch.bfloat16)


if __name__ == "__main__":
    drive(*(Path(a) for a in sys.argv[1:4]))
