import copy

import pytest
import torch
from torch import nn

from ftune.peft import DoRALinear


class Wrapper(nn.Module):
    def __init__(self, lin: nn.Linear) -> None:
        super().__init__()
        self.lin = lin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def make_layer(bias: bool = True, dropout: float = 0.0) -> tuple[nn.Linear, DoRALinear]:
    torch.manual_seed(0)
    base = nn.Linear(24, 40, bias=bias)
    return copy.deepcopy(base), DoRALinear(base, rank=4, alpha=8.0, dropout=dropout)


def perturb(layer: DoRALinear) -> None:
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        layer.lora_a.weight.copy_(torch.randn(layer.lora_a.weight.shape, generator=gen) * 0.2)
        layer.lora_b.weight.copy_(torch.randn(layer.lora_b.weight.shape, generator=gen) * 0.2)
        layer.magnitude.mul_(1 + 0.1 * torch.randn(layer.magnitude.shape, generator=gen))


def peft_twin(base: nn.Linear, layer: DoRALinear, dropout: float = 0.0) -> tuple[nn.Module, nn.Module]:
    """The same layer as a peft DoRA model, with our adapter values copied in."""
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, lora_alpha=8.0, lora_dropout=dropout, target_modules=["lin"], use_dora=True)
    model = peft.get_peft_model(Wrapper(base), config)
    lin = model.base_model.model.lin
    with torch.no_grad():
        lin.lora_A["default"].weight.copy_(layer.lora_a.weight)
        lin.lora_B["default"].weight.copy_(layer.lora_b.weight)
        lin.lora_magnitude_vector["default"].weight.copy_(layer.magnitude)
    return model, lin


def test_magnitude_starts_at_row_norms_and_output_is_unchanged() -> None:
    base, layer = make_layer()
    assert list(layer.state_dict()) == ["weight", "bias", "magnitude", "lora_a.weight", "lora_b.weight"]
    torch.testing.assert_close(layer.magnitude.detach(), base.weight.norm(dim=1), rtol=0, atol=0)
    x = torch.randn(3, 5, 24)
    torch.testing.assert_close(layer(x), base(x), rtol=1e-6, atol=1e-6)
    assert layer.magnitude.requires_grad and not layer.weight.requires_grad


@pytest.mark.parametrize("bias", [True, False])
def test_matches_peft_forward_and_gradients(bias: bool) -> None:
    base, layer = make_layer(bias=bias)
    perturb(layer)
    model, lin = peft_twin(base, layer)
    x = torch.randn(2, 7, 24)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    ours, theirs = layer(x1), model(x2)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(ours)
    ours.backward(grad)
    theirs.backward(grad)
    # Equal gradients pin the detached norm: with a differentiable norm lora_a/lora_b would differ.
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.magnitude.grad, lin.lora_magnitude_vector["default"].weight.grad)
    torch.testing.assert_close(
        layer.lora_a.weight.grad, lin.lora_A["default"].weight.grad, rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(
        layer.lora_b.weight.grad, lin.lora_B["default"].weight.grad, rtol=1e-5, atol=1e-6
    )
    assert layer.weight.grad is None


def test_matches_peft_with_dropout_in_training() -> None:
    base, layer = make_layer(dropout=0.3)
    perturb(layer)
    model, _ = peft_twin(base, layer, dropout=0.3)
    layer.train()
    model.train()
    x = torch.randn(4, 24)
    torch.manual_seed(11)
    ours = layer(x)
    torch.manual_seed(11)
    theirs = model(x)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    layer.eval()
    model.eval()
    torch.testing.assert_close(layer(x), model(x), rtol=1e-5, atol=1e-5)


def test_merged_weight_reproduces_forward() -> None:
    base, layer = make_layer()
    perturb(layer)
    x = torch.randn(5, 24)
    merged = layer.merged_weight()
    torch.testing.assert_close(nn.functional.linear(x, merged, layer.bias), layer(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(merged.norm(dim=1), layer.magnitude.detach(), rtol=1e-5, atol=1e-6)


def test_loading_a_base_weight_resets_the_magnitude() -> None:
    _, layer = make_layer()
    new_weight = torch.randn(40, 24)
    result = layer.load_state_dict({"weight": new_weight, "bias": torch.zeros(40)}, strict=False)
    assert set(result.missing_keys) == {"magnitude", "lora_a.weight", "lora_b.weight"}
    torch.testing.assert_close(layer.magnitude.detach(), new_weight.norm(dim=1))
    x = torch.randn(3, 24)
    torch.testing.assert_close(layer(x), x @ new_weight.T, rtol=1e-5, atol=1e-5)


def test_loaded_magnitude_wins() -> None:
    _, layer = make_layer()
    state = {k: v.clone() for k, v in layer.state_dict().items()}
    state["weight"] = torch.randn(40, 24)
    state["magnitude"] = torch.full((40,), 3.0)
    layer.load_state_dict(state)
    assert torch.equal(layer.magnitude.detach(), torch.full((40,), 3.0))
    # An adapter-only load (no base weight) leaves the loaded magnitude alone too.
    layer.load_state_dict({"magnitude": torch.full((40,), 2.0)}, strict=False)
    assert torch.equal(layer.magnitude.detach(), torch.full((40,), 2.0))
