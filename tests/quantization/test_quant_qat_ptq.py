"""Quantizers on a real tiny ftune model: QAT prepare/convert, fake-quant switch, PTQ, and errors."""

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torchao.quantization import Int8Tensor, IntxUnpackedToInt8Tensor
from torchao.quantization.qat import FakeQuantizedLinear

from ftune.modules.transformer import TransformerDecoder
from ftune.quantization import (
    DECODER_LINEARS,
    Int4WeightOnly,
    Int8DynActInt4Weight,
    Int8WeightOnly,
    IntxWeightOnly,
    Quantizer,
    enable_fake_quant,
    quantizer_from_spec,
)
from ftune.quantization.targets import is_target_fqn

Builder = Callable[..., TransformerDecoder]
DECODER_FQNS = [
    f"layers.{i}.{module}.{name}"
    for i in range(2)
    for module, names in (("attn", DECODER_LINEARS[:4]), ("mlp", DECODER_LINEARS[4:]))
    for name in names
]

# (quantizer, torchao tensor class its weights become, how close PTQ logits stay to float: rel. L2)
SCHEMES = [
    (Int8DynActInt4Weight(group_size=32), IntxUnpackedToInt8Tensor, 0.1),
    (Int8WeightOnly(), Int8Tensor, 0.01),
    (IntxWeightOnly(bits=4, group_size=32), IntxUnpackedToInt8Tensor, 0.1),
    (IntxWeightOnly(bits=8, group_size=None), IntxUnpackedToInt8Tensor, 0.01),
]
IDS = [repr(q) for q, _, _ in SCHEMES]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def linear_weights(model: nn.Module) -> dict[str, type]:
    return {fqn: type(m.weight) for fqn, m in model.named_modules() if isinstance(m, nn.Linear)}


@pytest.mark.parametrize(("quantizer", "tensor_type", "tol"), SCHEMES, ids=IDS)
def test_qat_prepare_then_convert_quantizes_exactly_the_decoder_linears(
    build_model: Builder, tokens: torch.Tensor, quantizer: Quantizer, tensor_type: type, tol: float
) -> None:
    model = build_model()
    with torch.no_grad():
        float_logits = model(tokens)
    assert quantizer.prepare(model) == DECODER_FQNS
    modules = dict(model.named_modules())
    assert all(type(modules[f]) is FakeQuantizedLinear for f in DECODER_FQNS)
    with torch.no_grad():
        fake_logits = model(tokens)
    assert not torch.equal(fake_logits, float_logits)

    assert quantizer.convert(model) == DECODER_FQNS
    weights = linear_weights(model)
    assert {weights[f] for f in DECODER_FQNS} == {tensor_type}
    assert weights["output"] is nn.Parameter  # output left in float by default
    assert type(model.tok_embeddings.weight) is nn.Parameter
    assert not any(isinstance(m, FakeQuantizedLinear) for m in model.modules())
    with torch.no_grad():
        real_logits = model(tokens)
    # Fake quantization simulates the real thing: QAT trains against what convert produces.
    torch.testing.assert_close(real_logits, fake_logits, rtol=0, atol=1e-4)
    assert rel_err(real_logits, float_logits) < tol


@pytest.mark.parametrize(("quantizer", "tensor_type", "tol"), SCHEMES, ids=IDS)
def test_ptq_logits_stay_close_to_float(
    build_model: Builder, tokens: torch.Tensor, quantizer: Quantizer, tensor_type: type, tol: float
) -> None:
    model = build_model()
    with torch.no_grad():
        float_logits = model(tokens)
    assert quantizer.quantize(model) == DECODER_FQNS
    assert {linear_weights(model)[f] for f in DECODER_FQNS} == {tensor_type}
    with torch.no_grad():
        quant_logits = model(tokens)
    assert 0 < rel_err(quant_logits, float_logits) < tol


def test_fake_quant_off_computes_exactly_the_float_model(build_model: Builder, tokens: torch.Tensor) -> None:
    float_model, model = build_model(), build_model()
    Int8DynActInt4Weight(group_size=32).prepare(model)
    assert enable_fake_quant(model, False) == len(DECODER_FQNS)
    assert torch.equal(model(tokens), float_model(tokens))
    # ... and so do the gradients: QAT with fake quant off is full fine-tuning.
    model(tokens).sum().backward()
    float_model(tokens).sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), float_model.named_parameters()):
        assert torch.equal(p.grad, q.grad), name
    enable_fake_quant(model, True)
    assert not torch.equal(model(tokens), float_model(tokens))


def test_qat_model_trains_through_fake_quantization(build_model: Builder, tokens: torch.Tensor) -> None:
    model = build_model().train()
    Int8DynActInt4Weight(group_size=32).prepare(model)
    weight = model.layers[0].attn.q_proj.weight
    before = weight.detach().clone()
    torch.optim.SGD(model.parameters(), lr=0.1).zero_grad()
    model(tokens).logsumexp(-1).mean().backward()
    assert weight.grad is not None and weight.grad.abs().sum() > 0  # straight-through estimator
    with torch.no_grad():
        weight -= 0.1 * weight.grad
    assert not torch.equal(weight, before)


def test_include_output_quantizes_the_output_projection(build_model: Builder) -> None:
    model = build_model()
    fqns = Int8DynActInt4Weight(group_size=32, include_output=True).quantize(model)
    assert fqns == [*DECODER_FQNS, "output"]
    assert type(model.output.weight) is IntxUnpackedToInt8Tensor


def test_target_names() -> None:
    assert is_target_fqn("layers.0.attn.q_proj", include_output=False)
    assert is_target_fqn("_orig_mod.layers.11.mlp.down_proj", include_output=False)
    assert not is_target_fqn("layers.0.attn.q_proj.lora_a", include_output=False)
    assert not is_target_fqn("layers.0.attn", include_output=False)  # a parent never matches
    assert not is_target_fqn("tok_embeddings", include_output=True)
    assert not is_target_fqn("output", include_output=False)
    assert is_target_fqn("output", include_output=True)


def test_spec_round_trip() -> None:
    for quantizer, _, _ in SCHEMES:
        rebuilt = quantizer_from_spec(quantizer.spec())
        assert type(rebuilt) is type(quantizer) and rebuilt.spec() == quantizer.spec()


def test_errors(build_model: Builder) -> None:
    q = Int8DynActInt4Weight(group_size=32)
    with pytest.raises(
        ValueError, match=r"Int8DynActInt4Weight.convert: TransformerDecoder has no fake-quantized"
    ):
        q.convert(build_model())
    with pytest.raises(
        ValueError, match=r"enable_fake_quant: TransformerDecoder has no fake-quantized linear"
    ):
        enable_fake_quant(build_model(), False)

    prepared = build_model()
    q.prepare(prepared)
    with pytest.raises(
        ValueError, match=r"prepare: the model is already prepared for QAT \(layers.0.attn.q_proj"
    ):
        q.prepare(prepared)
    with pytest.raises(ValueError, match=r"quantize: the model is prepared for QAT .*call convert\(model\)"):
        q.quantize(prepared)

    with_output = build_model()
    Int8DynActInt4Weight(group_size=32, include_output=True).prepare(with_output)
    with pytest.raises(
        ValueError, match=r"convert: output is fake-quantized but Int8DynActInt4Weight\(include_output=False"
    ):
        q.convert(with_output)

    quantized = build_model()
    q.quantize(quantized)
    with pytest.raises(
        ValueError, match=r"layers.0.attn.q_proj already has a quantized weight \(IntxUnpacked"
    ):
        q.quantize(quantized)

    with pytest.raises(
        ValueError, match=r"group_size=48 does not divide the in_features of layers.0.attn.q_proj"
    ):
        Int8DynActInt4Weight(group_size=48).quantize(build_model())
    with pytest.raises(
        ValueError, match=r"found no nn.Linear to quantize in Sequential.*nn.Linear modules are: 0"
    ):
        q.quantize(nn.Sequential(nn.Linear(32, 32)))
    with pytest.raises(ValueError, match=r"include_output=True, but TransformerDecoder.output is None"):
        Int8WeightOnly(include_output=True).quantize(build_model(tie_word_embeddings=True))
    with pytest.raises(
        ValueError, match=r"Int4WeightOnly needs the model on a CUDA device.*the model is on cpu"
    ):
        Int4WeightOnly(group_size=32).quantize(build_model())
    with pytest.raises(ValueError, match=r"IntxWeightOnly: bits must be an int from 1 to 8; got 9"):
        IntxWeightOnly(bits=9)
    with pytest.raises(ValueError, match=r"IntxWeightOnly\(bits=1\): torchao has no 1-bit fake quantization"):
        IntxWeightOnly(bits=1, group_size=32).prepare(build_model())
    with pytest.raises(
        ValueError, match=r"Int8DynActInt4Weight: group_size must be a positive int .*; got 0"
    ):
        Int8DynActInt4Weight(group_size=0)
    with pytest.raises(
        ValueError, match=r"Int4WeightOnly: group_size must be one of 32, 64, 128, 256; got 100"
    ):
        Int4WeightOnly(group_size=100)
    with pytest.raises(ValueError, match=r"Unknown quantizer 'ftune.quantization.Nope'"):
        quantizer_from_spec({"_component_": "ftune.quantization.Nope"})
