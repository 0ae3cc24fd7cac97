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


class RecordMatmuls(TorchDispatchMode):
    """Records (op, input shapes, output shape) of every mm / addmm run while active."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[tuple[int, ...]], tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if str(func).startswith(("aten.mm", "aten.addmm")):
            shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
            self.calls.append((str(func).split(".")[1], shapes[-2:], tuple(out.shape)))
        return out


def test_backward_computes_no_base_weight_gradient() -> None:
    base, layer = make_layer()
    with torch.no_grad():
        layer.lora_b.weight.normal_()
    x = torch.randn(16, 24, requires_grad=True)  # enough tokens for the merged path
    out = layer(x)
    with RecordShapes() as rec:
        out.square().sum().backward()
    assert base.weight.grad is None and base.bias.grad is None
    assert layer.lora_a.weight.grad is not None and layer.lora_b.weight.grad is not None
    # No backward reduction produces the bias's shape, and no matmul over the 16 tokens produces
    # the weight's: their gradients are skipped, not computed and dropped.
    assert not [s for op, s in rec.shapes if op.startswith("aten.sum") and s == (40,)]
    with RecordMatmuls() as mm:
        layer(x).square().sum().backward()
    products = sorted((inputs[0][-1], output) for _, inputs, output in mm.calls)  # (inner dim, output)
    assert (16, (40, 24)) not in products, products
    # fp32 takes the merged path: forward W + s·B·A (inner dim 4), then one GEMM; backward the
    # merge again, dx through it, and the two adapter gradients (through B, of A; through A, of B).
    assert products == sorted(
        [
            (4, (40, 24)),
            (24, (16, 40)),
            (4, (40, 24)),
            (40, (16, 24)),
            (40, (16, 4)),
            (16, (24, 4)),
            (24, (16, 4)),
            (16, (40, 4)),
        ]
    ), products


def unmerged(layer: LoRALinear, x: torch.Tensor) -> torch.Tensor:
    """The LoRA formula computed term by term, for comparison."""
    a, b = layer.lora_a.weight, layer.lora_b.weight
    return x @ layer.weight.T + layer.bias + layer.scale * ((x @ a.T) @ b.T)


def test_merged_path_equals_the_formula_with_gradients() -> None:
    _, layer = make_layer()
    with torch.no_grad():
        layer.lora_b.weight.normal_()
    x = torch.randn(2, 8, 24, requires_grad=True)
    assert layer._merged_path(x)
    params = (x, layer.lora_a.weight, layer.lora_b.weight)
    got = layer(x)
    grads = torch.autograd.grad(got.square().sum(), params)
    want = unmerged(layer, x)
    want_grads = torch.autograd.grad(want.square().sum(), params)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    # An input that needs no gradient (the first layer's): only the adapter gradients.
    grads = torch.autograd.grad(layer(x.detach()).square().sum(), params[1:])
    for g, w in zip(grads, torch.autograd.grad(unmerged(layer, x.detach()).square().sum(), params[1:])):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_merged_path_only_where_exact_enough() -> None:
    _, layer = make_layer(dropout=0.1)
    x = torch.randn(16, 24)
    assert not layer.train()._merged_path(x)  # dropout applies to the adapter input only
    assert layer.eval()._merged_path(x)
    # Merging costs 24·40·r, the adapter GEMMs n·(24 + 40)·r: below 15 tokens they are cheaper.
    assert not layer._merged_path(x[:14]) and layer._merged_path(x[:15])
    bf16 = LoRALinear(nn.Linear(24, 40, dtype=torch.bfloat16), rank=4, alpha=8.0)
    assert not bf16._merged_path(x.bfloat16())  # s·B·A would be rounded to W's 8-bit mantissa
    layer.weight.requires_grad_(True)
    assert not layer._merged_path(x)  # an unfrozen base needs its own gradient


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
