"""`quantize qat=true` converts with the learned ranges a QAT run saved (quantizer.learn_ranges=true),
and refuses settings that do not match the run. That the ranges train, are saved and resume exactly is
the feature matrix's `learned_ranges` check (tests/recipes/features_methods.py)."""

import pytest
import torch
from test_generate_quantize_eval import load_recipe

from ftune.checkpointing import load_hf
from ftune.checkpointing.inference import load_quantized_model
from ftune.checkpointing.qat_ranges import load_ranges
from ftune.config import load_config
from ftune.quantization import Int8DynActInt4Weight

QAT = ("qat_single_device", "smollm2/135M_qat_full")
LEARN = "quantizer.learn_ranges=true"


@pytest.fixture
def qat_step(run_recipe, tmp_path):
    """step_2 of a QAT run: with learned ranges, and without."""

    def step(*overrides):
        out = tmp_path / ("learned" if LEARN in overrides else "plain")
        run_recipe(*QAT, "max_steps=2", *overrides, output_dir=out)
        return out / "step_2"

    return step


def quantize(step, out, *overrides):
    cfg = [f"checkpointer.checkpoint_dir={step}", f"output_dir={out}", "qat=true", *overrides]
    load_recipe("quantize").main(load_config("quantization", cfg))
    return load_quantized_model(out, device=torch.device("cpu"))


def test_quantize_converts_with_the_learned_ranges(qat_step, tmp_path):
    step = qat_step(LEARN)
    model, metadata = quantize(step, tmp_path / "q", LEARN)
    assert metadata["quantizer"]["learn_ranges"] is True
    tokens = torch.arange(24)[None]
    learned, min_max = load_hf(step).eval(), load_hf(step).eval()
    quantizer = Int8DynActInt4Weight(group_size=32, learn_ranges=True)
    quantizer.prepare(learned, ranges=load_ranges(step))
    quantizer.convert(learned)
    Int8DynActInt4Weight(group_size=32).prepare(min_max)
    Int8DynActInt4Weight(group_size=32).convert(min_max)
    with torch.no_grad():
        got = model(tokens)
        assert torch.equal(got, learned(tokens))  # the saved ranges, not min/max ones
        assert not torch.equal(got, min_max(tokens))


def test_quantize_refuses_ranges_that_do_not_match_the_run(qat_step, tmp_path):
    with pytest.raises(ValueError, match=r"learn_ranges=true, but .*step_2 has no qat_ranges.safetensors"):
        quantize(qat_step(), tmp_path / "a", LEARN)
    with pytest.raises(ValueError, match=r"holds learned quantization ranges .* but learn_ranges is false"):
        quantize(qat_step(LEARN), tmp_path / "b")


def test_qat_lora_refuses_learned_ranges(run_recipe):
    with pytest.raises(ValueError, match=r"a LoRA run trains its adapters only.*learn_ranges=false"):
        run_recipe("qat_lora_finetune_distributed", "smollm2/135M_qat_lora", LEARN, "max_steps=1")
