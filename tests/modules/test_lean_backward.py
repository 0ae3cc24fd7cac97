"""RMSNorm and SwiGLU save less for backward than autograd would, and compute the same thing."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ftune.modules import RMSNorm, SwiGLU
from ftune.modules.rms_norm import rms_norm
from ftune.modules.rope import RotaryEmbedding, rotate_half


def saved_bytes(fn, module: nn.Module | None = None) -> int:
    """Bytes of the distinct tensors autograd saves while running fn (parameters, and views of
    `module`'s parameters such as a transposed weight, excluded)."""
    sizes = {}
    weights = {p.untyped_storage().data_ptr() for p in (module.parameters() if module else ())}

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptr = t.untyped_storage().data_ptr()
        if not isinstance(t, nn.Parameter) and ptr not in weights:
            sizes[ptr] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(sizes.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_output_exact_gradients_close_and_less_saved(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    norm = RMSNorm(64, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(3, 10, 64, dtype=dtype, requires_grad=True)

    def plain() -> torch.Tensor:
        return rms_norm(x, norm.weight, norm.eps)[0]  # the same ops, left to autograd

    got, want = norm(x), plain()
    assert torch.equal(got, want)
    dy = torch.randn_like(got)
    grads = torch.autograd.grad(got, (x, norm.weight), dy)
    want_grads = torch.autograd.grad(want, (x, norm.weight), dy)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 5e-2}
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, **tol)
    # Saved: x and the (rows, 1) rstd, not also x in fp32 and the normalised x.
    assert saved_bytes(lambda: norm(x)) == x.numel() * x.element_size() + 30 * 4
    assert saved_bytes(plain) > 2 * x.numel() * x.element_size()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("down", ["trained", "trained with bias", "frozen"])
def test_swiglu_output_and_gradients_bit_exact_and_less_saved(dtype: torch.dtype, down: str) -> None:
    torch.manual_seed(0)
    mlp = SwiGLU(
        gate_proj=nn.Linear(32, 96, bias=False, dtype=dtype),
        up_proj=nn.Linear(32, 96, bias=False, dtype=dtype),
        down_proj=nn.Linear(96, 32, bias=down == "trained with bias", dtype=dtype),
    )
    mlp.down_proj.requires_grad_(down != "frozen")
    x = torch.randn(2, 5, 32, dtype=dtype, requires_grad=True)

    def plain() -> torch.Tensor:
        return mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))

    got, want = mlp(x), plain()
    assert torch.equal(got, want)
    params = [x, mlp.gate_proj.weight, mlp.up_proj.weight]
    params += [p for p in mlp.down_proj.parameters() if p.requires_grad]
    dy = torch.randn_like(got)
    for g, w in zip(torch.autograd.grad(got, params, dy), torch.autograd.grad(want, params, dy), strict=True):
        assert torch.equal(g, w)
    hidden = 2 * 5 * 96 * x.element_size()  # one (2, 5, 96) activation
    # silu(gate) is never kept; a trained down projection's input (the product) is recomputed too.
    # A frozen one keeps no input: autograd needs only its weight.
    kept_less = hidden if down == "frozen" else 2 * hidden
    assert saved_bytes(plain, mlp) - saved_bytes(lambda: mlp(x), mlp) == kept_less


def test_no_autograd_function_when_nothing_needs_a_gradient() -> None:
    norm = RMSNorm(8).requires_grad_(False)
    x = torch.randn(2, 8)
    assert norm(x).grad_fn is None
    with torch.no_grad():
        assert RMSNorm(8)(x.requires_grad_()).grad_fn is None


def test_lean_backward_switch_leaves_the_forward_to_autograd(monkeypatch) -> None:
    norm = RMSNorm(16)
    mlp = SwiGLU(gate_proj=nn.Linear(16, 48), up_proj=nn.Linear(16, 48), down_proj=nn.Linear(48, 16))
    x = torch.randn(4, 16, requires_grad=True)
    lean = saved_bytes(lambda: norm(x)), saved_bytes(lambda: mlp(x), mlp)
    monkeypatch.setattr(RMSNorm, "lean_backward", False)
    monkeypatch.setattr(SwiGLU, "lean_backward", False)
    plain = saved_bytes(lambda: norm(x)), saved_bytes(lambda: mlp(x), mlp)
    assert plain[0] == saved_bytes(lambda: rms_norm(x, norm.weight, norm.eps)[0]) > lean[0]
    assert plain[1] - lean[1] == 2 * 4 * 48 * 4  # silu(gate) and the down projection's input kept again


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_rotation_and_gradient_bit_exact(dtype: torch.dtype) -> None:
    """RotaryEmbedding's in-place halves equal the rotate_half expression, forward and backward."""
    torch.manual_seed(0)
    rope = RotaryEmbedding(16)
    pos = torch.arange(12)[None].expand(2, 12)
    # (b, s, h, d) projections seen as (b, h, s, d): the non-contiguous layout attention passes.
    q = torch.randn(2, 12, 4, 16, dtype=dtype).transpose(1, 2).requires_grad_()
    k = torch.randn(2, 12, 2, 16, dtype=dtype).transpose(1, 2).requires_grad_()
    cos, sin = rope.cos_sin(pos, dtype)
    got = rope(q, k, pos)
    want = tuple(x * cos + rotate_half(x) * sin for x in (q, k))
    dy = [torch.randn_like(w) for w in want]
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    got_grads = torch.autograd.grad(got, (q, k), dy)
    want_grads = torch.autograd.grad(want, (q, k), dy)
    for g, w in zip(got_grads, want_grads):
        assert torch.equal(g, w)
    with torch.no_grad():  # inference takes the same in-place rotation
        for g, w in zip(rope(q, k, pos), want):
            assert torch.equal(g, w)
    # Saved for backward: cos and sin only, nothing of q's or k's size.
    assert saved_bytes(lambda: rope(q, k, pos)) == 2 * cos.numel() * cos.element_size()
