"""The feature checks of one training method each: QAT (fake quantization delayed, QAT + LoRA's base)
and knowledge distillation. Part of tests/recipes/features.py's CHECKS; same contract."""

from __future__ import annotations

import math

import pytest
import torch
from run_logs import losses
from spies import LargestVocabTensor, models_run

VOCAB = 320  # tests/assets/tiny_checkpoint.py SIZES["vocab_size"]


def qat_off(run, tmp_path):
    """Not a registry feature: QAT with fake quantization off for the whole run (compared with full)."""
    run("max_steps=4", "fake_quant_after_n_steps=100", output_dir=tmp_path)


def qat(run, tmp_path):
    """Fake quantization is off for the first fake_quant_after_n_steps steps and on from then on."""
    on, _ = run("max_steps=1", output_dir=tmp_path / "on")  # on from the start (null)
    late, _ = run("max_steps=2", "fake_quant_after_n_steps=1", output_dir=tmp_path / "late")
    float_only, _ = run("max_steps=2", "fake_quant_after_n_steps=100", output_dir=tmp_path / "float")
    assert losses(late)[0] != pytest.approx(losses(on)[0], rel=1e-6), (
        "step 1 has the same loss with fake quantization delayed and on from the start"
    )
    assert losses(late)[0] == pytest.approx(losses(float_only)[0], rel=1e-6), "step 1 was not float"
    assert losses(late)[1] != pytest.approx(losses(float_only)[1], rel=1e-6), "step 2 not fake-quantized"


def qat_lora_base(run, tmp_path):
    """Not a registry feature: QAT + LoRA's base is frozen and fake-quantized, in every decoder projection."""
    from torchao.quantization.qat import FakeQuantizedLinear

    from ftune.peft import LoRALinear
    from ftune.quantization import DECODER_LINEARS

    with models_run() as models:
        logs, _ = run("max_steps=2", output_dir=tmp_path)
    model = models[-1]
    projections = [(n, m) for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in DECODER_LINEARS]
    assert projections, "no decoder projection found"
    adapted = [n for n, m in projections if isinstance(m, LoRALinear)]
    assert adapted, "no LoRA layer: the adapters were not applied"
    for name, module in projections:  # adapted or not, every projection's base is fake-quantized and on
        quantizer = module.weight_fake_quantizer
        assert isinstance(module, (LoRALinear, FakeQuantizedLinear)), f"{name}: {type(module).__name__}"
        assert quantizer is not None and quantizer.enabled, f"{name}: base weight not fake-quantized"
        assert not module.weight.requires_grad, f"{name}: the base weight trains"
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in f".{n}" for n in trainable), f"trainable: {trainable[:4]}"
    assert all(math.isfinite(x) for x in losses(logs))


def knowledge_distillation(run, tmp_path):
    """The step's loss is (1 - kd_ratio) CE + kd_ratio KL(teacher || student), the teacher counts, and the
    loss runs in chunks: the largest fp32 (tokens, vocab) tensor shrinks with num_chunks.

    Step 1's loss is taken before any update, so the three ratios see the same student and batch.
    """
    one = ("max_steps=1",)
    ce, _ = run(*one, "loss.kd_ratio=0.0", output_dir=tmp_path / "ce")
    kl, _ = run(*one, "loss.kd_ratio=1.0", output_dir=tmp_path / "kl")
    with LargestVocabTensor(VOCAB) as whole_spy:
        whole, _ = run(*one, "loss.kd_ratio=0.5", "loss.num_chunks=1", output_dir=tmp_path / "whole")
    with LargestVocabTensor(VOCAB) as chunked_spy, models_run() as models:
        mixed, _ = run(*one, "loss.kd_ratio=0.5", "loss.num_chunks=8", output_dir=tmp_path / "mixed")
    teacher, student = models  # the teacher runs first in each step
    assert not any(p.requires_grad for p in teacher.parameters()), "the teacher is not frozen"
    if (
        torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
    ):  # sharded like the student
        from torch.distributed.tensor import DTensor

        layers = [p for layer in teacher.layers for p in layer.parameters()]
        assert layers and all(isinstance(p, DTensor) for p in layers), "the teacher's layers are not sharded"
    ce, kl = losses(ce)[0], losses(kl)[0]
    assert kl > 0.05 and abs(kl - ce) > 0.1, f"kd_ratio=1 gave {kl} (CE {ce}): no KL to a different teacher"
    assert losses(mixed)[0] == pytest.approx(0.5 * ce + 0.5 * kl, rel=1e-5), "not (1 - r) CE + r KL"
    assert losses(whole)[0] == pytest.approx(losses(mixed)[0], rel=1e-5)
    assert whole_spy.rows >= 16, f"one chunk made no full logits? largest {whole_spy.rows} rows"
    assert chunked_spy.rows * 4 <= whole_spy.rows, (
        f"8 chunks: largest fp32 logits tensor has {chunked_spy.rows} token rows, one chunk {whole_spy.rows}"
    )


def learned_ranges(run, tmp_path):
    """quantizer.learn_ranges=true: the weight scales train, are saved in qat_ranges.safetensors (not in
    the model's weights), and resume exactly (3 steps straight = 2 + resume + 1, ranges included)."""
    from features import resume
    from safetensors import safe_open

    from ftune.checkpointing.qat_ranges import RANGES_FILE, load_ranges

    resume(lambda *o, output_dir: run(*o, "quantizer.learn_ranges=true", output_dir=output_dir), tmp_path)
    step2, straight, resumed = (load_ranges(tmp_path / d) for d in ("b/step_2", "a/step_3", "b/step_3"))
    assert None not in (step2, straight, resumed), f"a step folder has no {RANGES_FILE}"
    assert sorted(straight) == sorted(resumed) == sorted(step2) and len(step2) == 14  # 2 layers x 7
    assert all(torch.equal(straight[k], resumed[k]) for k in straight), "the resumed run's ranges differ"
    assert all(not torch.equal(straight[k], step2[k]) for k in step2), "some ranges did not train in step 3"
    for weights in (tmp_path / "a" / "step_3").glob("*.safetensors"):
        if weights.name != RANGES_FILE:
            with safe_open(str(weights), framework="pt") as f:
                assert not [k for k in f.keys() if "fake_quantizer" in k], f"{weights.name} holds ranges"
