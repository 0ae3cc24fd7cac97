"""QLoRA over stacked experts: NF4 base weights (E * out, in), dequantized inside each grouped product,
computing what LoRA computes on the dequantized weights, at a fraction of the memory."""

import copy

import pytest
import torch

from ftune.models.qwen3_moe import qwen3_moe
from ftune.peft import apply_lora
from ftune.peft.moe_lora import EXPERT_WEIGHTS, LoRAGroupedExperts
from ftune.peft.nf4 import dequantize, is_nf4

pytest.importorskip("torchao")

SIZES = dict(vocab_size=128, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, intermediate_dim=128,
             moe_intermediate_dim=32, num_experts=8, top_k=2, head_dim=16, max_seq_len=64)  # fmt: skip
TARGETS = ["q_proj", "v_proj", "experts"]


def _pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    """A QLoRA model and a LoRA model whose base weights are the QLoRA model's dequantized ones, same adapters."""
    torch.manual_seed(0)
    base = qwen3_moe(**SIZES)
    qlora, lora = copy.deepcopy(base), copy.deepcopy(base)
    apply_lora(qlora, targets=TARGETS, rank=4, alpha=8.0, quantize_base=True)
    apply_lora(lora, targets=TARGETS, rank=4, alpha=8.0)
    with torch.no_grad():
        for (name, q), (_, p) in zip(qlora.named_parameters(), lora.named_parameters(), strict=True):
            if "lora_b" in name:
                q.normal_(std=0.1)  # B starts at zero: make the update count
            p.copy_(dequantize(q).view(p.shape) if is_nf4(q) else q)
    return qlora, lora


def test_stacked_experts_are_stored_in_nf4_and_nothing_else_changes_shape():
    qlora, _ = _pair()
    experts = [m for m in qlora.modules() if isinstance(m, LoRAGroupedExperts)]
    assert len(experts) == SIZES["num_layers"]
    for m in experts:
        for name in EXPERT_WEIGHTS:
            weight = getattr(m, name)
            e, out, inp = m.shapes[name]
            assert is_nf4(weight) and tuple(weight.shape) == (e * out, inp) and not weight.requires_grad
    dense_bytes = sum(e * o * i * 4 for m in experts for e, o, i in m.shapes.values())
    nf4_bytes = sum(
        t.numel() * t.element_size()
        for m in experts
        for name in EXPERT_WEIGHTS
        for t in (getattr(m, name).quantized_data, getattr(m, name).quantized_scalers)
    )
    assert nf4_bytes < dense_bytes / 7  # 4-bit codes and int8 scales against fp32
    trained = {n for n, p in qlora.named_parameters() if p.requires_grad}
    assert trained and all(".lora" in n for n in trained)


def test_qlora_experts_compute_what_lora_computes_on_the_dequantized_weights():
    qlora, lora = _pair()
    tokens = torch.randint(0, SIZES["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(1))
    out_q, out_l = qlora(tokens), lora(tokens)
    torch.testing.assert_close(out_q, out_l, rtol=1e-5, atol=1e-5)
    out_q.square().mean().backward()
    out_l.square().mean().backward()
    grads = {n: p.grad for n, p in qlora.named_parameters() if p.requires_grad}
    expected = {n: p.grad for n, p in lora.named_parameters() if p.requires_grad}
    assert grads.keys() == expected.keys() and any(".experts.lora." in n for n in grads)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)
    # The grouped product's input gradient flows through the NF4 experts to the layers below.
    assert grads["layers.0.attn.q_proj.lora_b.weight"].abs().sum() > 0


def test_merged_weights_fold_the_adapters_into_the_dequantized_base():
    qlora, lora = _pair()
    for mq, ml in zip(
        (m for m in qlora.modules() if isinstance(m, LoRAGroupedExperts)),
        (m for m in lora.modules() if isinstance(m, LoRAGroupedExperts)),
        strict=True,
    ):
        for name in EXPERT_WEIGHTS:
            torch.testing.assert_close(mq.merged_weight(name), ml.merged_weight(name))


def test_experts_that_nf4_cannot_hold_are_refused_before_anything_changes():
    sizes = {
        **SIZES,
        "embed_dim": 40,
        "head_dim": 10,
        "moe_intermediate_dim": 10,
        "num_experts": 3,
    }  # 3 x 20 x 40
    model = qwen3_moe(**sizes)
    before = {n: type(m) for n, m in model.named_modules()}
    with pytest.raises(ValueError, match="Cannot quantize layers.0.mlp.experts.gate_up_proj to NF4"):
        apply_lora(model, targets=["experts"], rank=4, alpha=8.0, quantize_base=True)
    assert {n: type(m) for n, m in model.named_modules()} == before
