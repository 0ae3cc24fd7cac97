"""A training run says first what it runs on, and which dtype is faster here, measured on its own model's products."""

import re

import torch

from ftune.runtime import hardware

MEASURED = re.compile(
    r"ftune: measured here, this model's matrix products run bf16 ([0-9.]+)x (faster|slower) than fp32 "
    r"\([0-9]+ vs [0-9]+ ms for a step of [0-9]+ tokens\); weights, gradients and AdamW state: "
    r"fp32 [0-9.]+ GiB, bf16 [0-9.]+ GiB\. (.*)\n"
)


def test_a_run_announces_device_dtype_and_the_measured_dtype_advice(run_recipe, tmp_path, capsys):
    run_recipe("full_finetune_single_device", "smollm2/135M_full", "max_steps=1", "dtype=bf16")
    err = capsys.readouterr().err
    cpu = torch.device("cpu")
    assert f"ftune: {hardware.startup_message(cpu, torch.bfloat16)}" in err
    (_, faster, verdict) = MEASURED.search(err).groups()
    assert verdict.startswith("dtype=bf16 as set")
    assert ("would be faster here" in verdict) == (faster == "slower")
    if hardware.native_bf16(cpu) is False:
        assert "This CPU has no native bf16 instructions" in verdict
    run_recipe(
        "full_finetune_single_device", "smollm2/135M_full", "max_steps=1", "dtype=auto",
        output_dir=tmp_path / "auto",
    )  # fmt: skip
    err = capsys.readouterr().err
    (_, faster, verdict) = MEASURED.search(err).groups()
    chosen = "bf16" if faster == "faster" else "fp32"
    assert f"in {chosen}\n" in err and verdict.startswith(f"dtype=auto chose {chosen}")
