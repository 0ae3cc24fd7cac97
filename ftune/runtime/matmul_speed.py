"""The matrix products of one training step, and how long this machine takes for them.

A decoder's step is mostly matrix products with a handful of shapes: each linear layer's forward
(``[T, in] @ [in, out]``), its input gradient (``[T, out] @ [out, in]``) and, when it trains, its
weight gradient (``[out, T] @ [T, in]``), for ``T`` tokens; a LoRA adapter adds six thin products.
:func:`step_products` lists them for a model's linear layers; :func:`time_products` times each
distinct shape on this machine and multiplies by how often it occurs. Their sum is the time a step
cannot beat with these kernels: the model's own matrix-product bound, against which
``benchmarks/vs_torchtune.py`` reports each tool's fraction, and the products
``ftune.training.dtype_advice`` times in fp32 and bf16 to say which is faster here.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Linear:
    """A linear layer's shape as the step sees it.

    Attributes:
        in_features: the input width.
        out_features: the output width.
        trains: whether its weight gets a gradient (full fine-tune) or stays frozen (LoRA's base).
        lora_rank: the rank of a LoRA adapter on it, 0 for none.
    """

    in_features: int
    out_features: int
    trains: bool
    lora_rank: int = 0


@dataclass(frozen=True)
class Product:
    """``count`` products of an ``[m, k]`` by a ``[k, n]`` matrix.

    ``a_t``/``b_t``: the operand is the transpose of a contiguous matrix, as a weight is in a
    forward (``x @ W.T``) and an activation in a weight gradient (``g.T @ x``); kernels differ.
    """

    m: int
    k: int
    n: int
    count: int
    a_t: bool = False
    b_t: bool = False

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n * self.count


def model_linears(
    model: nn.Module, *, trains: bool, lora_rank: int = 0, lora_targets: tuple[str, ...] = ()
) -> list[Linear]:
    """The linear layers of a decoder (built on any device, the meta device too) and its output projection.

    Args:
        model: a TransformerDecoder (``output``, or the embeddings when tied, is the vocabulary projection),
            or an image-text model (its encoder's and projector's layers, and its text ``decoder``'s).
        trains: whether the layers' weights train (full fine-tune); the output projection trains with
            them (tied embeddings train too) and is frozen under LoRA.
        lora_rank: the adapters' rank on ``lora_targets``.
        lora_targets: the last name part of the adapted layers (``q_proj``, ``v_proj``).
    """
    found = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            adapted = lora_rank if name.rsplit(".", 1)[-1] in lora_targets else 0
            found.append(Linear(module.in_features, module.out_features, trains, adapted))
    vocab, dim = model.head.weight.shape
    if getattr(model, "decoder", model).output is not None:  # untied: the loop above met it already
        found = [x for x in found if (x.in_features, x.out_features) != (dim, vocab)]
    found.append(Linear(dim, vocab, trains))
    return found


def step_products(linears: list[Linear], tokens: int) -> list[Product]:
    """Every matrix product of one step's linear layers on ``tokens`` tokens, forward and backward.

    The vocabulary projection is counted over every token, as a tool that projects all positions
    does (a recipe that skips unlabelled positions does less work than this on instruction data).
    """
    shapes: Counter[tuple[int, int, int, bool, bool]] = Counter()
    for x in linears:
        i, o, t = x.in_features, x.out_features, tokens
        shapes[(t, i, o, False, True)] += 1  # forward: x @ W.T
        shapes[(t, o, i, False, False)] += 1  # input gradient: g @ W
        if x.trains:
            shapes[(o, t, i, True, False)] += 1  # weight gradient: g.T @ x
        if r := x.lora_rank:  # x A.T, (x A.T) B.T; grads of B, of (x A.T), of A, and the input's share
            for shape in ((t, i, r, False, True), (t, r, o, False, True), (o, t, r, True, False),
                          (t, o, r, False, False), (r, t, i, True, False), (t, r, i, False, False)):  # fmt: skip
                shapes[shape] += 1
    return [Product(m, k, n, c, a_t, b_t) for (m, k, n, a_t, b_t), c in sorted(shapes.items())]


def time_product(
    p: Product, dtype: torch.dtype, *, device: torch.device | None = None, repeats: int = 3
) -> float:
    """Seconds of one of ``p``'s products in ``dtype`` on ``device`` (CPU by default): the best of
    ``repeats`` after a warm-up call (the first call picks kernels)."""
    device = device or torch.device("cpu")

    # A generator of its own: timing must not move the run's random streams (a recipe seeds before it).
    generator = torch.Generator(device).manual_seed(0)

    def matrix(rows: int, cols: int, transposed: bool) -> torch.Tensor:
        if transposed:
            return torch.randn(cols, rows, device=device, generator=generator).to(dtype).T
        return torch.randn(rows, cols, device=device, generator=generator).to(dtype)

    a, b = matrix(p.m, p.k, p.a_t), matrix(p.k, p.n, p.b_t)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def time_products(products: list[Product], dtype: torch.dtype, *, repeats: int = 3) -> float:
    """Seconds this machine takes for all of ``products`` in ``dtype``: the best of ``repeats`` of each
    distinct shape, times its count. Run it on a quiet machine: other processes' work adds to it."""
    return sum(time_product(p, dtype, repeats=repeats) * p.count for p in products)
