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


# A tiny Qwen3-MoE on the tiny checkpoint's tokenizer (vocabulary 320): layer 0 dense (so that the
# LoRA configs' targets gate_proj, up_proj and down_proj exist), layer 1 of 8 experts, top 2.
MOE_SIZES = dict(
    vocab_size=VOCAB,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    embed_dim=64,
    intermediate_dim=128,
    moe_intermediate_dim=32,
    num_experts=8,
    top_k=2,
    head_dim=16,
    mlp_only_layers=[0],
)
MOE_COEF = 0.5  # large, so that the term is a visible share of the loss and the update


def _tiny_moe_folder(folder):
    """transformers' Qwen3-MoE of MOE_SIZES saved in `folder` (weights and config.json only: the run
    keeps the tiny checkpoint's tokenizer); rank 0 writes it, every rank waits for it."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
    from ftune_tiny_hf import build_tiny_hf

    rank0 = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
    if rank0 and not (folder / "config.json").exists():
        s = MOE_SIZES
        build_tiny_hf(
            "qwen3_moe",
            vocab_size=s["vocab_size"],
            intermediate_size=s["intermediate_dim"],
            head_dim=s["head_dim"],
            mlp_only_layers=s["mlp_only_layers"],
            max_position_embeddings=512,
        ).save_pretrained(folder)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    return folder


def mixture_of_experts(run, tmp_path):
    """A Qwen3-MoE model trains: its load-balancing loss of the policy's own forward enters the step's
    loss once (the loss with coefficient c is the loss at 0 plus c * aux_loss) and reaches the gradient
    (the weights one step leaves differ with the term on and off); aux_loss is logged either way."""
    from run_logs import _column, _weights

    folder = _tiny_moe_folder(tmp_path / "moe")
    moe = [
        "model=ftune.models.qwen3_moe.qwen3_moe",
        *[f"model.{k}={v}".replace(" ", "") for k, v in MOE_SIZES.items()],
        f"checkpointer.checkpoint_dir={folder}",
        "max_steps=1",
        "lr_scheduler.num_warmup_steps=0",  # step 1 updates the weights
    ]
    runs = {}
    for coef in (MOE_COEF, 0.0):
        logs, out = run(*moe, f"model.aux_loss_coef={coef}", output_dir=tmp_path / f"coef_{coef}")
        runs[coef] = (losses(logs)[0], _column(logs, "aux_loss")[0], _weights(out / "step_1"))
    (on, on_aux, on_w), (off, off_aux, off_w) = runs[MOE_COEF], runs[0.0]
    # top_k (2) for perfectly even routing, up to num_experts (8) when every token picks the same two.
    assert 1.9 < on_aux < 8.0 and on_aux == pytest.approx(off_aux, rel=1e-6), (on_aux, off_aux)
    assert on == pytest.approx(off + MOE_COEF * on_aux, rel=1e-5), f"loss {on}, without the term {off}"
    assert any(not torch.equal(on_w[k], off_w[k]) for k in on_w), "the term did not reach the gradient"
