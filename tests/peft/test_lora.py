import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ftune.peft import LoRALinear


class RecordShapes(TorchDispatchMode):
    """Records the output shape of every aten op run while active."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            self.shapes.append((str(func), tuple(out.shape)))
        return out


def make_layer(bias: bool = True, **kwargs) -> tuple[nn.Linear, LoRALinear]:
    torch.manual_seed(0)
    base = nn.Linear(24, 40, bias=bias)
    return base, LoRALinear(base, **{"rank": 4, "alpha": 8.0, **kwargs})


def test_keeps_base_parameters_and_names() -> None:
    base, layer = make_layer()
    assert layer.weight is base.weight and layer.bias is base.bias
    assert list(layer.state_dict()) == ["weight", "bias", "lora_a.weight", "lora_b.weight"]
    assert layer.lora_a.weight.shape == (4, 24) and layer.lora_b.weight.shape == (40, 4)
    assert layer.scale == 2.0
    assert not layer.weight.requires_grad and not layer.bias.requires_grad
    assert layer.lora_a.weight.requires_grad and layer.lora_b.weight.requires_grad


@pytest.mark.parametrize("bias", [True, False])
def test_output_unchanged_at_init(bias: bool) -> None:
    base, layer = make_layer(bias=bias)
    x = torch.randn(3, 5, 24)
    assert torch.equal(layer(x), base(x))


def test_forward_formula_after_update() -> None:
    base, layer = make_layer()
    with torch.no_grad():
        layer.lora_b.weight.normal_()
    x = torch.randn(6, 24)
    a, b = layer.lora_a.weight, layer.lora_b.weight
    expected = x @ base.weight.T + base.bias + 2.0 * (x @ a.T @ b.T)
    torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.merged_weight(), base.weight + 2.0 * b @ a)
    torch.testing.assert_close(nn.functional.linear(x, layer.merged_weight(), base.bias), layer(x))


def test_backward_computes_no_base_weight_gradient() -> None:
    base, layer = make_layer()
    with torch.no_grad():
        layer.lora_b.weight.normal_()
    x = torch.randn(8, 24, requires_grad=True)
    out = layer(x)
    with RecordShapes() as rec:
        out.square().sum().backward()
    assert base.weight.grad is None and base.bias.grad is None
    assert layer.lora_a.weight.grad is not None and layer.lora_b.weight.grad is not None
    # No backward matmul or reduction produces the base weight's or bias's shape: their gradients
    # are skipped, not computed and dropped.
    computed = [
        (op, shape) for op, shape in rec.shapes if op.startswith(("aten.mm", "aten.addmm", "aten.sum"))
    ]
    assert not [c for c in computed if c[1] in {(40, 24), (40,)}], computed
    mms = [shape for op, shape in computed if op.startswith("aten.mm")]
    # grad of B, grad through B, grad of A, x.grad through A, x.grad through W: five, none for W.
    assert sorted(mms) == sorted([(40, 4), (8, 4), (4, 24), (8, 24), (8, 24)]), mms


def test_dropout_only_on_adapter_path() -> None:
    base, layer = make_layer(dropout=0.5)
    with torch.no_grad():
        layer.lora_b.weight.normal_()
    x = torch.randn(16, 24)
    layer.train()
    torch.manual_seed(3)
    out = layer(x)
    torch.manual_seed(3)
    dropped = nn.functional.dropout(x, 0.5, training=True)
    expected = base(x) + 2.0 * layer.lora_b(layer.lora_a(dropped))
    torch.testing.assert_close(out, expected)
    layer.eval()
    torch.testing.assert_close(layer(x), base(x) + 2.0 * layer.lora_b(layer.lora_a(x)))


def test_reset_adapter_parameters_zeroes_b() -> None:
    base, layer = make_layer()
    with torch.no_grad():
        layer.lora_b.weight.normal_()
    layer.reset_adapter_parameters()
    assert torch.count_nonzero(layer.lora_b.weight) == 0
    assert torch.count_nonzero(layer.lora_a.weight) > 0


def test_adapter_follows_base_dtype() -> None:
    base = nn.Linear(8, 16, dtype=torch.bfloat16)
    layer = LoRALinear(base, rank=2, alpha=4)
    assert layer.lora_a.weight.dtype == torch.bfloat16 and layer.lora_b.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("rank", [0, -2, 2.0, True])
def test_bad_rank_is_rejected(rank) -> None:
    with pytest.raises(ValueError, match=r"LoRA rank must be a positive int, got .*Set e\.g\. rank=8"):
        LoRALinear(nn.Linear(4, 4), rank=rank, alpha=1.0)


@pytest.mark.parametrize("dropout", [-0.1, 1.0])
def test_bad_dropout_is_rejected(dropout: float) -> None:
    with pytest.raises(ValueError, match=r"LoRA dropout must be in \[0, 1\), got"):
        LoRALinear(nn.Linear(4, 4), rank=2, alpha=1.0, dropout=dropout)
