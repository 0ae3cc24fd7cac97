"""QAT + LoRA: LoRA layers over torchao's fake-quantized linears (Quantizer.prepare, then apply_lora)."""

import pytest
import torch
import torch.nn.functional as F
from torchao.quantization.qat import FakeQuantizedLinear

from ftune.peft import LoRALinear, apply_lora
from ftune.quantization import DECODER_LINEARS, Int8DynActInt4Weight, enable_fake_quant

TARGETS = ["q_proj", "v_proj", "down_proj"]


def qat_lora(build_model, **lora):
    torch.manual_seed(0)
    model = build_model()
    Int8DynActInt4Weight(group_size=32).prepare(model)
    apply_lora(model, targets=TARGETS, rank=4, alpha=8, **lora)
    return model


def plain_lora(build_model):
    torch.manual_seed(0)
    model = build_model()
    apply_lora(model, targets=TARGETS, rank=4, alpha=8)
    return model


def test_prepare_leaves_the_global_rng_where_it_was(build_model):
    model = build_model()
    torch.manual_seed(3)
    Int8DynActInt4Weight(group_size=32).prepare(model)
    drawn = torch.rand(4)
    torch.manual_seed(3)
    assert torch.equal(drawn, torch.rand(4))


def test_adapters_over_a_fake_quantized_frozen_base(build_model, tokens):
    model = qat_lora(build_model)
    layers = {n: m for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in DECODER_LINEARS}
    adapted = {n: m for n, m in layers.items() if isinstance(m, LoRALinear)}
    assert {n.rsplit(".", 1)[-1] for n in adapted} == set(TARGETS)
    assert all(m.fake_quantized for m in adapted.values())
    others = [m for n, m in layers.items() if n not in adapted]
    assert others and all(type(m) is FakeQuantizedLinear for m in others)  # frozen, still fake-quantized
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n for n in trainable)

    # The layer: fake-quantized base path plus the float adapter path, on the unquantized input.
    layer = adapted["layers.0.attn.q_proj"]
    torch.nn.init.normal_(layer.lora_b.weight)
    x = torch.randn(2, 5, layer.in_features)
    base = F.linear(layer.activation_fake_quantizer(x), layer.weight_fake_quantizer(layer.weight), layer.bias)
    want = base + layer.scale * layer.lora_b(layer.lora_a(x))
    torch.testing.assert_close(layer(x), want)
    assert not torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias) + want - base)


def test_with_fake_quant_off_it_is_exactly_plain_lora(build_model, tokens):
    model, reference = qat_lora(build_model), plain_lora(build_model)
    assert enable_fake_quant(model, False) == 14  # 2 layers x 7 projections, adapted or not
    for m in (model, reference):
        for layer in m.modules():
            if isinstance(layer, LoRALinear):
                torch.nn.init.normal_(layer.lora_b.weight, generator=torch.Generator().manual_seed(2))
    assert torch.equal(model(tokens), reference(tokens))
    model(tokens).sum().backward()
    reference(tokens).sum().backward()
    got = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    want = {n: p.grad for n, p in reference.named_parameters() if p.requires_grad}
    assert got.keys() == want.keys() and all(torch.equal(got[n], want[n]) for n in got)
    enable_fake_quant(model, True)
    assert not torch.equal(model(tokens), reference(tokens))


def test_qlora_and_dora_over_fake_quantized_layers_are_refused(build_model):
    with pytest.raises(ValueError, match="base would be quantized twice.*peft.quantize_base=false"):
        qat_lora(build_model, quantize_base=True)
    with pytest.raises(ValueError, match="DoRA is not supported with QAT.*peft.use_dora=false"):
        qat_lora(build_model, use_dora=True)
