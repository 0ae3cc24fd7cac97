"""Every image family through the distributed recipes at world size 2 on CPU (gloo): SmolVLM
(Idefics3), Gemma 3's vision path, a LLaVA-style composition and Llama 3.2 Vision (cross-attention),
each a tiny random folder written by transformers (tests/recipes/tiny_vlm_folders.py) with LoRA in the
encoder, the projector and the decoder.

- lora_finetune_distributed at world size 2 equals lora_finetune_single_device on the same global
  batch (losses, gradient norms, adapters within the tolerances below); full_finetune_distributed too
  (SmolVLM: every weight);
- 2 steps, resume, 1 step equals 3 steps straight, bit for bit;
- FSDP2 shards the vision encoder's layers, the projector and the decoder: every parameter is a
  DTensor split by rows over the 2 ranks, each encoder layer and the projector a unit of their own;
- the ranks' images differ in number, and one rank's batches hold none (chats 1 and 3 are text
  only): that rank encodes a blank image whose features add zero, so both ranks run the same units.
  Llama 3.2 Vision's batches pad each sample to the batch's most images (a text token before its
  sample's first image reads the padding images, as in transformers): its chats hold 2, 2, 1 and 2
  images, so every batch pads to 2 at either world size.

This file is also the torchrun driver (one launch runs every case):

    torchrun --nproc_per_node 2 test_vlm_distributed.py <workdir>
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import torch
from conftest import load_recipe
from run_logs import _column, _weights, losses, read_log
from tiny_vlm_folders import FAMILIES, TARGETS, chats

from ftune.config import load_config

pytestmark = [pytest.mark.distributed, pytest.mark.matrix]

HERE = Path(__file__).resolve()
STEPS = 3
FULL = "smolvlm"  # the family full_finetune_distributed runs on
IMAGES = {"llama3_2_vision": (2, 2, 1, 2)}  # else tiny_vlm_folders.IMAGES_PER_CHAT: (1, 0, 2, 0)
# World size 2 against one device, measured (3 steps, 1 thread a rank): losses differ by at most 1.2e-7
# relative, gradient norms by 2.1e-7 (the reduce-scatter sums in another order), adapters by 4.9e-7
# absolute (values up to 0.27) and SmolVLM's full weights by 2.2e-6 (up to 0.47): Adam's normalised
# step magnifies tiny gradient differences.
RTOL = 1e-5
WEIGHT_ATOL = 1e-5


def prepare(workdir: Path) -> None:
    """Each family's folder and chats under workdir/<family> (once, before the launch)."""
    for family, make in FAMILIES.items():
        path = workdir / family
        path.mkdir(parents=True, exist_ok=True)
        folder, overrides = make(path)
        data = chats(path, *(IMAGES[family],) if family in IMAGES else ())
        (path / "run.json").write_text(json.dumps({"folder": str(folder), "data": str(data), "o": overrides}))


def overrides(workdir: Path, family: str, method: str, out: Path, batch_size: int) -> list[str]:
    run = json.loads((workdir / family / "run.json").read_text())
    peft = [f"peft.targets={TARGETS[family]}", "peft.rank=4", "peft.alpha=8"] if method == "lora" else []
    return [
        f"tokenizer.path={run['folder']}",
        "tokenizer.max_seq_len=256",
        f"checkpointer.checkpoint_dir={run['folder']}",
        f"dataset.source={run['data']}",
        *run["o"],
        *peft,
        f"output_dir={out}",
        "device=cpu",
        "dtype=fp32",
        f"batch_size={batch_size}",
        "shuffle=false",  # rank 0 reads chats 0 and 2, rank 1 chats 1 and 3
        "grad_accum_steps=1",
        "epochs=100",
        f"max_steps={STEPS}",
        "activation_checkpointing=false",
        "save_every_n_steps=2",
        "progress_bar=false",
        f"optimizer.lr={3e-2 if method == 'lora' else 1e-2}",
        "optimizer.fused=false",
        "lr_scheduler.num_warmup_steps=0",
    ]


def config_of(method: str) -> str:
    return f"smolvlm/256M_{method}"  # the checkpointer reads each family's model from its config.json


CASES = [*((f, "lora") for f in FAMILIES), (FULL, "full")]


# --- the world-size-2 side (runs under torchrun) -------------------------------------------------


def check_shards(model: torch.nn.Module) -> None:
    """Every parameter (encoder, projector, decoder) is a DTensor split by rows over both ranks, and each
    encoder layer and the projector is an FSDP2 unit of its own."""
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor, Shard

    rank = dist.get_rank()
    parts = {"vision_encoder": 0, "projector": 0, "decoder": 0}
    for name, p in model.named_parameters():
        assert isinstance(p, DTensor), f"{name} is not sharded"
        assert p.device_mesh.size() == 2 and p.placements == (Shard(0),), f"{name}: {p.placements}"
        rows = torch.arange(p.shape[0]).chunk(2)  # FSDP2 splits as torch.chunk does
        mine = len(rows[rank]) if rank < len(rows) else 0
        assert p.to_local().shape[0] == mine, f"{name}: {tuple(p.to_local().shape)} of {tuple(p.shape)}"
        parts[name.split(".")[0]] += 1
    assert all(parts.values()), parts
    units = [model.projector, *model.vision_encoder.layers, *model.decoder.layers]
    assert all(isinstance(m, FSDPModule) for m in units), [type(m).__name__ for m in units]


def drive(workdir: Path, only: str | None = None) -> None:
    """Every case in one process group; {case: "ok" | traceback} in workdir/results.json."""
    from datetime import timedelta

    import torch.distributed as dist

    from ftune import training

    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    sharded = []
    real = training.shard_model

    def shard_model(model, *args, **kwargs):
        sharded.append(real(model, *args, **kwargs))
        return sharded[-1]

    training.shard_model = shard_model

    def run(family, method, out, *extra):
        cfg = load_config(config_of(method), [*overrides(workdir, family, method, out, 2), *extra])
        dist.barrier()
        load_recipe(f"{method}_finetune_distributed").main(cfg)
        dist.barrier()

    results = {}
    for family, method in CASES:
        case = f"{family}_{method}"
        if only and case != only:
            continue
        out = workdir / "ws2" / case
        try:
            run(family, method, out)
            check_shards(sharded[-1])
            if dist.get_rank() == 0:
                shutil.copytree(out / "step_2", workdir / "resumed" / case / "step_2")
            run(family, method, workdir / "resumed" / case, "checkpointer.resume_from_checkpoint=auto")
            results[case] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test, which fails with it
            results[case] = traceback.format_exc(limit=8)
            print(f"rank {dist.get_rank()}, {case}: {results[case]}", file=sys.stderr, flush=True)
        dist.barrier()
    if dist.get_rank() == 0:
        (workdir / "results.json").write_text(json.dumps(results, indent=2))
    dist.destroy_process_group()


# --- the tests -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """The folders, then the world-size-2 runs (one torchrun launch): (results, workdir)."""
    workdir = tmp_path_factory.mktemp("vlm_ws2")
    prepare(workdir)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(HERE)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[2])}
    proc = subprocess.run([*cmd, str(workdir)], capture_output=True, text=True, timeout=1500, env=env)
    results = workdir / "results.json"
    assert results.exists(), f"driver failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(results.read_text()), workdir


def single(workdir: Path, family: str, method: str) -> Path:
    """The single-device recipe on the same global batch (4 chats a step); its output folder."""
    out = workdir / "one" / f"{family}_{method}"
    if not out.exists():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            cfg = load_config(config_of(method), overrides(workdir, family, method, out, 4))
            load_recipe(f"{method}_finetune_single_device").main(cfg)
        finally:
            torch.set_num_threads(threads)
    return out


@pytest.mark.parametrize("family, method", CASES)
def test_world_size_2_equals_one_device(family, method, launched):
    results, workdir = launched
    case = f"{family}_{method}"
    assert results[case] == "ok", results[case]
    ours, theirs = read_log(workdir / "ws2" / case), read_log(single(workdir, family, method))
    assert len(losses(ours)) == STEPS
    assert losses(ours) == pytest.approx(losses(theirs), rel=RTOL)
    assert _column(ours, "grad_norm") == pytest.approx(_column(theirs, "grad_norm"), rel=RTOL)
    a = _weights(workdir / "ws2" / case / f"step_{STEPS}")
    b = _weights(workdir / "one" / case / f"step_{STEPS}")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=WEIGHT_ATOL, msg=k)
    if method == "lora":  # the adapters of the encoder (and the projector) trained, as the decoder's
        trained = {k.split(".")[3] for k in a if "lora_B" in k and a[k].abs().sum() > 0}
        assert len(trained) >= 2 and any("vision" in part for part in trained), trained


@pytest.mark.parametrize("family, method", CASES)
def test_resume_is_exact(family, method, launched):
    results, workdir = launched
    case = f"{family}_{method}"
    assert results[case] == "ok", results[case]
    straight, resumed = read_log(workdir / "ws2" / case), read_log(workdir / "resumed" / case)
    assert [r["step"] for r in resumed if "loss" in r] == [STEPS]
    assert losses(resumed) == losses(straight)[2:]
    a = _weights(workdir / "ws2" / case / f"step_{STEPS}")
    b = _weights(workdir / "resumed" / case / f"step_{STEPS}")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


if __name__ == "__main__":
    drive(Path(sys.argv[1]), *sys.argv[2:])
