"""Mixture-of-experts SwiGLU experts stored as stacked weights, computed as grouped matrix products.

The (token, choice) pairs are sorted by expert, so that each expert's rows are one contiguous slice;
every projection is then one grouped product (`torch._grouped_mm`) over those slices: no Python loop
over tokens or experts. benchmarks/moe_experts.py measures it against a loop over experts, padded
`bmm` and a dense einsum on this CPU (results in benchmarks/results/moe_experts.json).
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

#: The grouped-product kernels: "grouped_mm" (one `torch._grouped_mm` call) or "loop" (one `mm` per
#: expert over its contiguous slice; the fallback where `torch._grouped_mm` is missing).
BACKENDS = ("grouped_mm", "loop")


class Groups(NamedTuple):
    """The (token, choice) pairs of a routing, sorted by expert.

    Attributes:
        token: (T * k,) long, the token of each sorted row.
        order: (T * k,) long, each sorted row's index in the flat (T * k) routing.
        offsets: (E,) int32, the end of each expert's rows (cumulative counts), as `_grouped_mm` takes.
    """

    token: torch.Tensor
    order: torch.Tensor
    offsets: torch.Tensor


def sort_by_expert(indices: torch.Tensor, num_experts: int) -> Groups:
    """Group the routing `indices` (T, k) by expert (stable: tokens keep their order in a group)."""
    flat = indices.reshape(-1)  # (T * k,)
    order = torch.argsort(flat, stable=True)  # (T * k,)
    counts = torch.bincount(flat, minlength=num_experts)  # (E,)
    return Groups(order // indices.shape[1], order, torch.cumsum(counts, 0).to(torch.int32))


def grouped_matmul(
    x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor, backend: str
) -> torch.Tensor:
    """Rows of group e times weight[e]ᵀ, for all groups: (N, in) x (E, out, in) -> (N, out).

    Args:
        x: (N, in), rows sorted by group.
        weight: (E, out, in), one Linear-style weight per group.
        offsets: (E,) int32 cumulative row counts (`Groups.offsets`).
        backend: one of `BACKENDS`.
    """
    if backend == "grouped_mm":
        return _grouped_linear(x, weight, offsets)
    out = x.new_empty(x.shape[0], weight.shape[1])  # (N, out)
    start = 0
    for e, end in enumerate(offsets.tolist()):
        if end > start:
            out[start:end] = x[start:end] @ weight[e].t()
        start = end
    return out


# `torch._grouped_mm` wrapped as custom ops: its own fake (meta) kernel accepts bf16 only, so
# torch.compile could not trace it in fp32; and its CPU backward needs a dense incoming gradient
# (an expanded one, as from `.sum()`, raises "Invalid strides").
@torch.library.custom_op("ftune::grouped_mm", mutates_args=())
def _grouped_mm(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """(N, K) x (E, K, M) -> (N, M), or (M, N) x (N, K) -> (E, M, K): groups along N."""
    if b.dim() == 3 or a.device.type != "cpu":
        return torch._grouped_mm(a, b, offs=offsets)
    # The weight gradient on CPU: one mm per expert is ~4x faster than _grouped_mm's 2D x 2D case
    # (0.19 s against 0.86 s for a Qwen3-30B-A3B layer's 4096 rows, one thread; forward and input
    # gradient are on par). Inside the op, so torch.compile never sees the loop or its host sync.
    out = a.new_zeros(offsets.shape[0], a.shape[0], b.shape[1])  # experts without rows stay zero
    start = 0
    for e, end in enumerate(offsets.tolist()):
        if end > start:
            torch.mm(a[:, start:end], b[start:end], out=out[e])
        start = end
    return out


@_grouped_mm.register_fake
def _(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    if b.dim() == 3:
        return a.new_empty(a.shape[0], b.shape[2])  # (N, M)
    return a.new_empty(offsets.shape[0], a.shape[0], b.shape[1])  # (E, M, K)


@torch.library.custom_op("ftune::grouped_linear", mutates_args=())
def _grouped_linear(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """(N, in) x (E, out, in)ᵀ -> (N, out)."""
    return torch._grouped_mm(x, weight.transpose(-2, -1), offs=offsets)


@_grouped_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], weight.shape[1])


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
    x, weight, offsets = ctx.saved_tensors
    grad = grad.contiguous()
    grad_x = grad_w = None
    if ctx.needs_input_grad[0]:
        grad_x = _grouped_mm(grad, weight, offsets)  # (N, out) x (E, out, in) -> (N, in)
    if ctx.needs_input_grad[1]:
        # (out, N) x (N, in) per group -> (E, out, in); an expert with no rows gets zeros.
        grad_w = _grouped_mm(grad.t(), x, offsets)
    return grad_x, grad_w, None


_grouped_linear.register_autograd(_backward, setup_context=_setup_context)


class GroupedExperts(nn.Module):
    """num_experts SwiGLU feed-forwards: down_e(silu(gate_e(x)) * up_e(x)), mixed by routing weights.

    Weights are stacked, Linear-style (out, in) per expert, under transformers 5's names: `gate_up_proj`
    (E, 2 * hidden_dim, embed_dim) holds gate_e then up_e, `down_proj` (E, embed_dim, hidden_dim).

    Args:
        num_experts: E.
        embed_dim: token width.
        hidden_dim: each expert's SwiGLU width (HF `moe_intermediate_size`).
        backend: how grouped products run, one of `BACKENDS`.

    Raises:
        ValueError: an unknown backend.
    """

    def __init__(
        self, *, num_experts: int, embed_dim: int, hidden_dim: int, backend: str = "grouped_mm"
    ) -> None:
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"GroupedExperts: backend must be one of {BACKENDS}, got {backend!r}.")
        if backend == "grouped_mm" and not hasattr(torch, "_grouped_mm"):
            backend = "loop"  # older torch: same numbers, one mm per expert
        self.num_experts, self.embed_dim, self.hidden_dim, self.backend = (
            num_experts,
            embed_dim,
            hidden_dim,
            backend,
        )
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * hidden_dim, embed_dim))
        self.down_proj = nn.Parameter(torch.empty(num_experts, embed_dim, hidden_dim))
        if not self.down_proj.is_meta:
            nn.init.normal_(self.gate_up_proj, std=0.02)
            nn.init.normal_(self.down_proj, std=0.02)

    def project(self, name: str, x: torch.Tensor, groups: Groups) -> torch.Tensor:
        """The grouped product of the rows `x` with the stacked weight `name` (LoRA overrides this)."""
        return grouped_matmul(x, getattr(self, name), groups.offsets, self.backend)

    def forward(self, x: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Mix the chosen experts' outputs.

        Args:
            x: (T, embed_dim) tokens.
            indices: (T, k) long, the experts each token goes to.
            weights: (T, k) mixing weights, in x's dtype, or fp32 to weight and sum the experts'
                outputs in fp32 before rounding to x's dtype.

        Returns:
            (T, embed_dim): sum over the k choices of weight * expert(x).
        """
        groups = sort_by_expert(indices, self.num_experts)
        rows = x[groups.token]  # (T * k, embed_dim), grouped by expert
        gate, up = self.project("gate_up_proj", rows, groups).chunk(2, dim=-1)  # (T * k, hidden) each
        out = self.project("down_proj", F.silu(gate) * up, groups)  # (T * k, embed_dim)
        out = out * weights.reshape(-1)[groups.order, None]  # in the wider of the two dtypes
        return out.new_zeros(x.shape).index_add_(0, groups.token, out).to(x.dtype)  # (T, embed_dim)

    def extra_repr(self) -> str:
        return (
            f"num_experts={self.num_experts}, embed_dim={self.embed_dim}, hidden_dim={self.hidden_dim}, "
            f"backend={self.backend}"
        )
