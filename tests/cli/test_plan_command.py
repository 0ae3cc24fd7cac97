"""`ftune plan`: the terms and peak it prints are the library's plan; --memory lists what fits; its refusals."""

import re

import pytest

from ftune.cli.main import main
from ftune.cli.plan import parse_memory, render
from ftune.config import load_config
from ftune.planning import plan_config


def test_plan_prints_the_librarys_plan(capsys):
    args = ["lora_finetune_single_device", "--config", "smollm2/135M_lora", "batch_size=2"]
    assert main(["plan", *args]) == 0
    out = capsys.readouterr().out
    expected = plan_config(load_config("smollm2/135M_lora", ["batch_size=2"]), "lora_finetune_single_device")
    title = "lora_finetune_single_device --config smollm2/135M_lora"
    assert out.splitlines() == render(expected, title)
    assert "step: sft, 2 sequences x 256 tokens a micro-batch" in out
    assert out.splitlines()[-1].split() == ["peak", f"{expected.peak_gib:.2f}", "GiB"]


def test_memory_that_fits_says_so_and_one_that_does_not_lists_the_changes(capsys):
    args = ["full_finetune_single_device", "--config", "smollm2/135M_full", "tokenizer.max_seq_len=512"]
    assert main(["plan", *args, "--memory", "80GiB"]) == 0
    assert "Fits in 80.00 GiB" in capsys.readouterr().out
    assert main(["plan", *args, "--memory", "2.5GiB"]) == 0  # some change fits
    out = capsys.readouterr().out
    assert "Does not fit in 2.50 GiB" in out
    assert "activation_checkpointing=true" in out and "the LoRA recipe and config" in out
    assert "ftune run --nproc_per_node 2" in out


def test_distributed_plan_shards_over_the_ranks(capsys):
    args = ["full_finetune_distributed", "--config", "smollm2/135M_full"]
    assert main(["plan", "--nproc_per_node", "2", *args]) == 0
    out = capsys.readouterr().out
    assert "per rank (2 ranks, FSDP2, cpu, float32)" in out and "weights: one layer gathered" in out


@pytest.mark.parametrize(
    "text, gib", [("24GiB", 24.0), ("80 GiB", 80.0), ("16GB", 16e9 / 2**30), ("512MiB", 0.5), ("12", 12.0)]
)
def test_memory_sizes(text, gib):
    assert parse_memory(text) == pytest.approx(gib)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["full_finetune_single_device", "--memory", "lots"],
         r"--memory 'lots': not a memory size\. Give a positive number with a unit, e\.g\. --memory 24GiB"),
        (["generate"], r"ftune plan generate: not a training recipe; .* Training recipes: full_finetune_single_device"),
        (["--nproc_per_node", "2", "full_finetune_single_device"],
         r"--nproc_per_node 2: full_finetune_single_device runs on one device\. .*full_finetune_distributed"),
        (["full_finetune_single_device", "batch_sise=2"], r"batch_sise"),
    ],
)  # fmt: skip
def test_refusals_say_what_and_how_to_fix(argv, message, capsys):
    assert main(["plan", *argv]) == 1
    assert re.search(message, capsys.readouterr().err), message
