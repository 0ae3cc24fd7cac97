"""The start-up line and the bf16 warning: native bf16 is read from the CPU flags, the warning quotes the measurement."""

import json
from pathlib import Path

import pytest
import torch

from ftune.runtime import hardware

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
AVX2_ONLY = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma\n"
AVX512_BF16 = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
AMX = "model name\t: Intel Xeon Sapphire\nflags\t\t: avx2 amx_tile amx_bf16\n"
ARM_BF16 = "processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n"


@pytest.mark.parametrize(
    "cpuinfo, native",
    [(AVX2_ONLY, False), (AVX512_BF16, True), (AMX, True), (ARM_BF16, True), ("processor : 0\n", None)],
)
def test_native_bf16_is_read_from_the_cpu_flags(cpuinfo, native):
    assert hardware.native_bf16(CPU, cpuinfo) is native


def test_bf16_without_native_support_warns_with_the_measured_slowdown_and_the_fix():
    warning = hardware.dtype_warning(CPU, torch.bfloat16, AVX2_ONLY)
    assert warning is not None
    assert "AMD EPYC" in warning and "avx512_bf16" in warning
    assert hardware.EMULATED_BF16_SLOWDOWN in warning and "Set dtype=fp32" in warning
    lines = hardware.describe(CPU, torch.bfloat16, AVX2_ONLY)
    assert lines[0].startswith("running on cpu (AMD EPYC,") and lines[0].endswith("in bf16")
    assert lines[1] == f"warning: {warning}"


@pytest.mark.parametrize(
    "dtype, cpuinfo", [(torch.float32, AVX2_ONLY), (torch.bfloat16, AVX512_BF16), (torch.bfloat16, "x\n")]
)
def test_no_warning_for_fp32_native_bf16_or_unknown_hardware(dtype, cpuinfo):
    assert hardware.dtype_warning(CPU, dtype, cpuinfo) is None
    assert len(hardware.describe(CPU, dtype, cpuinfo)) == 1


def test_startup_message_names_device_threads_and_dtype():
    assert hardware.startup_message(CPU, torch.float32, AVX2_ONLY) == (
        f"running on cpu (AMD EPYC, {torch.get_num_threads()} threads) in fp32"
    )


def test_the_quoted_slowdown_is_the_measured_one():
    result = json.loads((ROOT / "benchmarks/results/bf16_matmul.json").read_text())
    ratios = sorted(run["ratio"] for run in result["rows"])
    median = ratios[len(ratios) // 2]
    assert result["machine"]["native_bf16"] is False
    assert hardware.EMULATED_BF16_SLOWDOWN == f"about {round(median)}x"
