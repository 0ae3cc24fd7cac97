import copy

import pytest
import torch
from conftest import ALL_TARGETS
from torch import nn

from ftune.checkpointing.adapter import merged_state_dict
from ftune.peft import (
    DoRALinear,
    LoRALinear,
    adapter_state_dict,
    apply_lora,
    trainable_params,
)
from ftune.peft.nf4 import dequantize, is_nf4, to_nf4_parameter

pytest.importorskip("torchao")


def test_quantized_layer_matches_lora_on_the_dequantized_weight() -> None:
    torch.manual_seed(0)
    base = nn.Linear(64, 96)
    layer = LoRALinear(copy.deepcopy(base), rank=4, alpha=8.0, quantize_base=True)
    assert layer.quantized and is_nf4(layer.weight) and isinstance(layer.weight, nn.Parameter)
    assert layer.weight.dtype == torch.float32 and not layer.weight.requires_grad
    dense = dequantize(layer.weight)
    assert 0 < (dense - base.weight).abs().max() < 0.16 * base.weight.abs().max()  # NF4 max gap: 0.14
    reference = LoRALinear(nn.Linear(64, 96), rank=4, alpha=8.0)
    with torch.no_grad():
        reference.weight.copy_(dense)
        reference.bias.copy_(base.bias)
        layer.lora_b.weight.normal_()
        reference.lora_a.weight.copy_(layer.lora_a.weight)
        reference.lora_b.weight.copy_(layer.lora_b.weight)
    x1 = torch.randn(3, 64, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    out, expected = layer(x1), reference(x2)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.lora_a.weight.grad, reference.lora_a.weight.grad, rtol=1e-5, atol=1e-5)
    assert layer.weight.grad is None
    torch.testing.assert_close(layer.merged_weight(), reference.merged_weight())


@pytest.mark.parametrize("use_dora", [False, True])
def test_qlora_tiny_model_trains_on_cpu(toy_model, tokens, perturb, use_dora: bool) -> None:
    model = toy_model()
    apply_lora(model, targets=ALL_TARGETS, rank=4, alpha=8.0, use_dora=use_dora, quantize_base=True)
    layers = [m for m in model.modules() if isinstance(m, LoRALinear)]
    assert len(layers) == 15 and all(m.quantized for m in layers)
    assert all(isinstance(m, DoRALinear) == use_dora for m in layers)
    model.train()
    optimizer = torch.optim.SGD(trainable_params(model), lr=0.5)
    losses = []
    for _ in range(3):
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    for name, p in model.named_parameters():
        assert (p.grad is not None) == p.requires_grad, name
    # Merged logits equal the adapted logits (the NF4 base merges as its dequantized weight).
    model.eval()
    perturb(model)
    adapted = model(tokens)
    fresh = toy_model()
    fresh.load_state_dict(merged_state_dict(model.state_dict(), {"alpha": 8.0}))
    torch.testing.assert_close(fresh(tokens), adapted, rtol=1e-5, atol=1e-5)


def test_state_dict_is_dense_and_reloads(toy_model, tokens) -> None:
    model = toy_model()
    apply_lora(model, targets=["q_proj", "output"], rank=4, alpha=8.0, quantize_base=True)
    state = model.state_dict()
    assert not any(is_nf4(v) for v in state.values())
    assert state["output.weight"].dtype == torch.float32 and state["output.weight"].shape == (96, 64)
    # A base checkpoint loads into the quantized model (weights are re-quantized on copy).
    reference = toy_model(seed=5)
    result = model.load_state_dict(reference.state_dict(), strict=False)
    assert set(result.missing_keys) == set(adapter_state_dict(model)) and not result.unexpected_keys
    assert is_nf4(model.output.weight)
    diff = dequantize(model.output.weight) - reference.output.weight
    assert diff.abs().max() < 0.16 * reference.output.weight.abs().max()


def test_bad_shape_for_nf4_is_rejected() -> None:
    with pytest.raises(
        ValueError, match=r"Cannot quantize layers.0.attn.q_proj.weight to NF4: shape \(3, 7\)"
    ):
        to_nf4_parameter(torch.randn(3, 7), name="layers.0.attn.q_proj.weight")


def test_bad_shape_is_caught_before_any_swap() -> None:
    model = nn.Sequential()
    model.add_module("q_proj", nn.Linear(64, 64))
    model.add_module("v_proj", nn.Linear(5, 3))
    with pytest.raises(ValueError, match=r"Cannot quantize v_proj.weight to NF4: shape \(3, 5\)"):
        apply_lora(model, targets=["q_proj", "v_proj"], rank=2, alpha=2.0, quantize_base=True)
    assert type(model.q_proj) is nn.Linear


def test_assign_load_keeps_the_base_quantized(toy_model, tokens) -> None:
    model = toy_model()
    apply_lora(model, targets=["q_proj", "output"], rank=4, alpha=8.0, quantize_base=True)
    reference = toy_model(seed=5)
    model.load_state_dict(reference.state_dict(), strict=False, assign=True)
    assert is_nf4(model.output.weight) and is_nf4(model.layers[1].attn.q_proj.weight)
    assert not model.output.weight.requires_grad
    diff = dequantize(model.output.weight) - reference.output.weight
    assert diff.abs().max() < 0.16 * reference.output.weight.abs().max()
