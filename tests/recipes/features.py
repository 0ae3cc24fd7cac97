"""One check per registry feature: run a recipe with the feature on and check its effect, not just that it ran.

Shared by the single-device and distributed feature-matrix tests. Each check gets
`run(*overrides, output_dir=...) -> (logs, output_dir)` for one recipe and config.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ftune.checkpointing.atomic import is_complete


def read_log(output_dir: Path) -> list[dict]:
    """The DiskLogger's JSONL rows of a run (every file in output_dir/logs, in name order)."""
    import json

    rows = []
    for file in sorted((output_dir / "logs").glob("*.jsonl")):
        rows += [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return rows


def losses(logs):
    return [row["loss"] for row in logs if "loss" in row]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    name = (
        "adapter_model.safetensors"
        if (folder / "adapter_model.safetensors").exists()
        else "model.safetensors"
    )
    return load_file(str(folder / name))


def grad_accumulation(run, tmp_path):
    one, _ = run("max_steps=3", "batch_size=4", "grad_accum_steps=1", output_dir=tmp_path / "one")
    two, _ = run("max_steps=3", "batch_size=2", "grad_accum_steps=2", output_dir=tmp_path / "two")
    # Token-normalised: 2 micro-batches of 2 are exactly one batch of 4 (same samples, same order).
    assert losses(two) == pytest.approx(losses(one), rel=1e-5)
    assert [r["tokens_trained"] for r in two] == [r["tokens_trained"] for r in one]


def grad_clipping(run, tmp_path):
    clip = 0.01
    sgd = (
        "max_steps=1",
        "optimizer=torch.optim.SGD",
        "optimizer.weight_decay=0.0",
        "lr_scheduler.num_warmup_steps=0",
    )
    _, base = run(*sgd, "optimizer.lr=0.0", output_dir=tmp_path / "zero")  # the starting weights
    logs, out = run(*sgd, "optimizer.lr=1.0", f"clip_grad_norm={clip}", output_dir=tmp_path / "clip")
    assert logs[0]["grad_norm"] > 10 * clip  # the reported norm is the one before clipping
    before, after = _weights(base / "step_1"), _weights(out / "step_1")
    delta = math.sqrt(sum(float((after[k] - before[k]).double().pow(2).sum()) for k in after))
    assert delta == pytest.approx(clip, rel=1e-3)  # SGD, lr 1: the update is the clipped gradient


def compile(run, tmp_path):
    eager, _ = run("max_steps=2", output_dir=tmp_path / "eager")
    compiled, _ = run("max_steps=2", "compile=true", output_dir=tmp_path / "compiled")
    assert losses(compiled) == pytest.approx(losses(eager), rel=1e-4)


def activation_checkpointing(run, tmp_path):
    plain, _ = run("max_steps=3", output_dir=tmp_path / "plain")
    ac, out = run("max_steps=3", "activation_checkpointing=true", output_dir=tmp_path / "ac")
    assert losses(ac) == pytest.approx(losses(plain), rel=1e-6)
    assert not any("checkpoint" in k for k in _weights(out / "step_3"))  # no wrapper prefixes in the keys


def optimizer_in_backward(run, tmp_path):
    normal, _ = run("max_steps=3", "clip_grad_norm=null", output_dir=tmp_path / "normal")
    bwd, _ = run(
        "max_steps=3", "clip_grad_norm=null", "optimizer_in_backward=true", output_dir=tmp_path / "bwd"
    )
    assert losses(bwd) == pytest.approx(losses(normal), rel=1e-5)


def low_precision_optimizers(run, tmp_path):
    from ftune.checkpointing import load_recipe_state

    def moments(out):
        state = load_recipe_state(out / "step_1")["optimizer"]["state"]
        return [v for s in state.values() for k, v in s.items() if k in ("exp_avg", "exp_avg_sq")]

    fp32, a = run("max_steps=2", "save_every_n_steps=1", output_dir=tmp_path / "fp32")
    bf16, b = run(
        "max_steps=2",
        "save_every_n_steps=1",
        "optimizer=ftune.training.AdamWBf16State",
        output_dir=tmp_path / "bf16",
    )
    assert {t.dtype for t in moments(a)} == {torch.float32}
    assert {t.dtype for t in moments(b)} == {torch.bfloat16}  # half the bytes of fp32 AdamW's moments
    assert losses(bf16)[0] == losses(fp32)[0]  # same model and batch before the first update
    assert losses(bf16)[1] == pytest.approx(losses(fp32)[1], rel=1e-3)  # then AdamW's update, nearly


def chunked_loss(run, tmp_path):
    one, _ = run("max_steps=2", "loss.num_chunks=1", output_dir=tmp_path / "one")
    many, _ = run("max_steps=2", "loss.num_chunks=7", output_dir=tmp_path / "many")
    assert losses(many) == pytest.approx(losses(one), rel=1e-5)


def custom_collate(run, tmp_path):
    from recipe_test_components import CALLS

    before = CALLS["collate"]
    logs, _ = run(
        "max_steps=2",
        "collate_fn._component_=recipe_test_components.counting_collate",
        "collate_fn._partial_=true",
        "collate_fn.pad_id=0",
        output_dir=tmp_path / "c",
    )
    assert CALLS["collate"] > before
    assert all(r["tokens"] % 16 == 0 for r in logs)  # its padding, not the default's


def packing(run, tmp_path):
    logs, _ = run("max_steps=2", "dataset.packed=true", "dataset.max_seq_len=64", output_dir=tmp_path / "p")
    assert [r["tokens"] for r in logs] == [4 * 64, 4 * 64]  # fixed-shape rows
    assert all(r["tokens_trained"] > 4 * 8 for r in logs)  # several documents' answers per row


def validation(run, tmp_path):
    logs, _ = run("max_steps=4", "run_val_every_n_steps=2", "max_val_batches=2", output_dir=tmp_path / "v")
    val = {r["step"]: r["val_loss"] for r in logs if "val_loss" in r}
    assert sorted(val) == [2, 4]
    assert all(math.isfinite(v) for v in val.values()) and val[2] != val[4]


def step_checkpointing(run, tmp_path):
    _, out = run(
        "max_steps=5",
        "save_every_n_steps=2",
        "checkpointer.keep_last_n_checkpoints=2",
        output_dir=tmp_path / "s",
    )
    kept = sorted(p.name for p in out.glob("step_*"))
    assert kept == ["step_4", "step_5"]  # step_2 pruned
    assert all(is_complete(out / k) for k in kept)
    assert (out / "step_4" / "recipe_state.pt").is_file()


def resume(run, tmp_path):
    straight, a = run("max_steps=4", output_dir=tmp_path / "a")
    first, b = run("max_steps=4", "save_every_n_steps=2", output_dir=tmp_path / "b")
    shutil.rmtree(b / "step_4", ignore_errors=True)  # every rank runs this
    shutil.rmtree(b / "logs", ignore_errors=True)
    second, _ = run("max_steps=4", "checkpointer.resume_from_checkpoint=auto", output_dir=b)
    assert losses(first)[:2] + losses(second) == losses(straight)
    wa, wb = _weights(a / "step_4"), _weights(b / "step_4")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def metric_logging(run, tmp_path):
    logs, out = run("max_steps=3", output_dir=tmp_path / "m")
    assert [r["step"] for r in logs] == [1, 2, 3]
    assert all({"loss", "lr", "tokens_per_second", "peak_memory_gib"} <= r.keys() for r in logs)


def profiler(run, tmp_path):
    _, out = run("max_steps=4", "profile=true", output_dir=tmp_path / "prof")
    assert list((out / "profile").glob("*.json")), "no trace written"


def lora(run, tmp_path):
    _, out = run("max_steps=2", output_dir=tmp_path / "l")
    saved = _weights(out / "step_2")
    assert saved and all("lora_" in k for k in saved)  # adapter only, PEFT names


def qlora_refused(run, tmp_path):
    """Not a registry feature: the distributed LoRA recipe refuses QLoRA with a message (n/a there)."""
    with pytest.raises(ValueError, match=r"FSDP2 cannot shard NF4-quantized base weights \(QLoRA\)"):
        run("max_steps=1", "peft.quantize_base=true", output_dir=tmp_path)


def qlora(run, tmp_path):
    logs, out = run("max_steps=2", "peft.quantize_base=true", output_dir=tmp_path / "q")
    assert all(math.isfinite(x) for x in losses(logs))
    assert all("lora_" in k for k in _weights(out / "step_2"))


def dora(run, tmp_path):
    logs, out = run("max_steps=2", "peft.use_dora=true", output_dir=tmp_path / "d")
    assert any("magnitude" in k for k in _weights(out / "step_2"))


def qat_off(run, tmp_path):
    """Not a registry feature: QAT with fake quantization off for the whole run (compared with full)."""
    run("max_steps=4", "fake_quant_after_n_steps=100", output_dir=tmp_path)


def qat(run, tmp_path):
    on, _ = run("max_steps=2", output_dir=tmp_path / "on")
    late, _ = run("max_steps=3", "fake_quant_after_n_steps=2", output_dir=tmp_path / "late")
    # Steps 1-2 of `late` are float (the same weights: step 1's lr is 0 in warmup), step 3 is not.
    assert losses(on)[:2] != pytest.approx(losses(late)[:2], rel=1e-6)
    float_only, _ = run("max_steps=2", "fake_quant_after_n_steps=100", output_dir=tmp_path / "float")
    assert losses(late)[:2] == pytest.approx(losses(float_only), rel=1e-6)


def fsdp2(run, tmp_path):
    import torch.distributed as dist

    logs, out = run("max_steps=2", output_dir=tmp_path)
    assert dist.get_world_size() == 2
    assert (out / "step_2").is_dir() and all(math.isfinite(x) for x in losses(logs))


def cpu_offload(run, tmp_path):
    """On a CPU-only machine parameters already live on the CPU: the setting must run and change nothing.
    (The GPU path, FSDP2's CPUOffloadPolicy, needs an accelerator this suite does not have.)"""
    plain, _ = run("max_steps=2", output_dir=tmp_path / "plain")
    offload, _ = run("max_steps=2", "fsdp_cpu_offload=true", output_dir=tmp_path / "offload")
    assert losses(offload) == pytest.approx(losses(plain), rel=1e-6)


CHECKS = {
    f.__name__: f
    for f in (
        qat_off,
        qlora_refused,
        qat,
        fsdp2,
        cpu_offload,
        grad_accumulation,
        grad_clipping,
        compile,
        activation_checkpointing,
        optimizer_in_backward,
        chunked_loss,
        low_precision_optimizers,
        custom_collate,
        packing,
        validation,
        step_checkpointing,
        resume,
        metric_logging,
        profiler,
        lora,
        qlora,
        dora,
    )
}
