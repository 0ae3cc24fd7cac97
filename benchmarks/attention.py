"""The attention core alone on CPU: every option PyTorch offers, against the step's own matrix-product rate.

    python benchmarks/attention.py                 # 4x512, 1x2048, 1x8192; causal and packed documents
    python benchmarks/attention.py --quick         # plumbing: 4x512 only, one round (not figures)

SmolLM2-135M's attention (9 query heads sharing 3 key/value heads, head dim 64, fp32): q, k, v ->
output, forward alone and forward + backward (the gradients of q, k and v), for batch x sequence
4x512, 1x2048 and 1x8192, under a causal mask and a packed-document mask (7 documents per 512
tokens, lengths drawn with a fixed seed, each row its own). Options: SDPA's default dispatch
(``is_causal`` for causal, the bool mask for documents), SDPA with the causal mask as a bool tensor,
SDPA forced to each backend (``torch.nn.attention.sdpa_kernel``; those not on CPU are recorded with
their error), ftune's CPU path as it ships (``ftune.modules.cpu_attention``: the kernel its table
picks for the shape), each kernel that table may name (SDPA calls on blocks of 64, 128 or 256 query
rows; the same blocks as plain matrix products with a recomputing backward,
``ftune.modules.matmul_attention``; either row by row for a batch of several rows), and ``flex_attention``
compiled with a block mask (its compile time reported apart; PyTorch 2.13 has no backward for it on
CPU, recorded as such). Each option is checked against fp64 (SDPA in float64; at 8k ftune's blocks in
float64, one call would need 5 GiB of scores): the largest absolute difference of the output and of
each gradient; "exact" means at most 1e-4 times the reference's largest magnitude (fp32 rounding).

Timing: options interleave round by round, the best round counts. FLOPs count the pairs the mask
allows (4 d a pair forward, 8 d backward); the bound is those FLOPs at the rate this machine runs
the step's own matrix products (SmolLM2-135M's linear layers, ``ftune.runtime.matmul_speed``,
measured before and after: the faster counts). Writes benchmarks/results/attention.json (``--out``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import load1, write_results  # noqa: E402

from ftune.models.smollm2 import smollm2_135m  # noqa: E402
from ftune.modules import causal_mask, document_causal_mask  # noqa: E402
from ftune.modules import cpu_attention as ca  # noqa: E402
from ftune.runtime.cpu_load import others_cores  # noqa: E402
from ftune.runtime.matmul_speed import model_linears, step_products, time_products  # noqa: E402
from ftune.training.run.dtype_advice import probe_tokens  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64
SHAPES = {"4x512": (4, 512), "1x2048": (1, 2048), "1x8192": (1, 8192)}
DOCS_PER_512 = 7
EXACT = 1e-4  # largest |difference| / largest |reference| still counted as fp32 rounding
MATH_MAX_GIB = 2.0  # the MATH backend materialises the scores: skipped beyond this (8k would need ~10 GiB)


def document_ids(batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    """(batch, seq) ids of packed documents, DOCS_PER_512 per 512 tokens, each row cut at its own random points."""
    g = torch.Generator().manual_seed(seed)
    docs = max(1, seq * DOCS_PER_512 // 512)
    rows = []
    for _ in range(batch):
        cuts = torch.randperm(seq - 1, generator=g)[: docs - 1] + 1
        starts = torch.zeros(seq, dtype=torch.long)
        starts[cuts] = 1
        rows.append(starts.cumsum(0))
    return torch.stack(rows)


def pairs(mask: torch.Tensor | None, batch: int, seq: int) -> int:
    """(query, key) pairs the mask allows, over the batch (per head)."""
    return batch * seq * (seq + 1) // 2 if mask is None else int(mask.expand(batch, seq, seq).sum())


def sdpa(q, k, v, mask, backend: SDPBackend | None = None, as_mask: bool = False) -> torch.Tensor:
    if mask is None and as_mask:
        mask = causal_mask(q.shape[2])[None]
    call = lambda: F.scaled_dot_product_attention(  # noqa: E731
        q, k, v, attn_mask=None if mask is None else mask[:, None], is_causal=mask is None, enable_gqa=True
    )
    if backend is None:
        return call()
    with sdpa_kernel(backend):
        return call()


def ftune_path(q, k, v, mask) -> torch.Tensor:
    """ftune's CPU attention as GroupedQueryAttention calls it (o_proj = identity), back to (b, h, s, d)."""
    b, h, s, d = q.shape
    return ca.cpu_attention(q, k, v, mask, gqa=True, o_proj=nn.Identity()).view(b, s, h, d).transpose(1, 2)


def kernel(name: str) -> Callable:
    """ftune's CPU path with its table set to `name` for every mask kind and length."""

    def run(q, k, v, mask):
        table = ca.CPU_KERNELS
        ca.CPU_KERNELS = {kind: [(None, name)] for kind in table}
        try:
            return ftune_path(q, k, v, mask)
        finally:
            ca.CPU_KERNELS = table

    return run


KERNELS = ["blocked 64", "blocked 128", "blocked 256", "matmul 64", "matmul 128", "matmul 256",
           "blocked 64 by row", "blocked 256 by row", "matmul 128 by row", "matmul 256 by row"]  # fmt: skip
OPTIONS: dict[str, Callable] = {
    "sdpa (default dispatch)": sdpa,
    "sdpa, causal as a bool mask": lambda q, k, v, m: sdpa(q, k, v, m, as_mask=True),
    "sdpa MATH": lambda q, k, v, m: sdpa(q, k, v, m, SDPBackend.MATH),
    "sdpa FLASH_ATTENTION": lambda q, k, v, m: sdpa(q, k, v, m, SDPBackend.FLASH_ATTENTION),
    "sdpa EFFICIENT_ATTENTION": lambda q, k, v, m: sdpa(q, k, v, m, SDPBackend.EFFICIENT_ATTENTION),
    "sdpa CUDNN_ATTENTION": lambda q, k, v, m: sdpa(q, k, v, m, SDPBackend.CUDNN_ATTENTION),
    "ftune (shipped)": ftune_path,
    **{f"ftune {name}": kernel(name) for name in KERNELS},
    "flex_attention compiled": None,  # built per shape (flex_option)
}


def today(shape: str, kind: str) -> str:
    """The option ftune ran before this benchmark: 64-row blocks, 256 (document-split) for a one-row mask."""
    return "ftune blocked 256" if kind == "documents" and SHAPES[shape][0] == 1 else "ftune blocked 64"


# The options ftune can ship (ftune.modules.cpu_attention.CPU_KERNELS' names) and the table's keys: the
# mask kind and longest sequence each measured shape stands for (None: any longer).
SHIPPABLE = {"sdpa (default dispatch)": "sdpa", **{f"ftune {name}": name for name in KERNELS}}
TABLE_KEYS = {("4x512", "causal"): ("causal", 1024), ("1x2048", "causal"): ("causal", 4096),
              ("1x8192", "causal"): ("causal", None), ("4x512", "documents"): ("masked", None),
              ("1x2048", "documents"): ("masked, one row", 4096),
              ("1x8192", "documents"): ("masked, one row", None)}  # fmt: skip


def kernel_table(rows: list[dict]) -> dict[str, list[tuple[int | None, str]]]:
    """CPU_KERNELS as the rows give it: per measured shape and mask, the shippable exact option with the
    shortest forward + backward."""
    table: dict[str, list[tuple[int | None, str]]] = {}
    for (shape, kind), (key, longest) in TABLE_KEYS.items():
        timed = [r for r in rows if (r["shape"], r["mask"]) == (shape, kind) and r["option"] in SHIPPABLE
                 and r.get("exact") and r.get("fwd_bwd_ms") is not None]  # fmt: skip
        if timed:
            fastest = min(timed, key=lambda r: r["fwd_bwd_ms"])
            table.setdefault(key, []).append((longest, SHIPPABLE[fastest["option"]]))
    return table


def flex_option(
    mask: torch.Tensor | None, doc: torch.Tensor | None, b: int, s: int
) -> tuple[Callable, float]:
    """flex_attention compiled for this shape with a block mask; the seconds its first call (compile) took."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def mask_mod(bi, hi, qi, ki):
        same = True if doc is None else doc[bi, qi] == doc[bi, ki]
        return (qi >= ki) & same

    start = time.perf_counter()
    block_mask = create_block_mask(mask_mod, b if doc is not None else None, None, s, s, device="cpu")
    compiled = torch.compile(flex_attention, dynamic=False)

    def run(q, k, v, _mask):
        if not torch.is_grad_enabled():  # flex refuses inputs that require grad when it has no backward
            q, k, v = q.detach(), k.detach(), v.detach()
        return compiled(q, k, v, block_mask=block_mask, enable_gqa=True)

    with torch.no_grad():
        probe = [torch.randn(b, h, s, HEAD_DIM) for h in (HEADS, KV_HEADS, KV_HEADS)]
        run(*probe, None)
    return run, time.perf_counter() - start


def reference(q, k, v, mask, grad) -> list[torch.Tensor]:
    """Output and q, k, v gradients in float64."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    b, h, s, d = q.shape
    if s > 4096:  # one fp64 SDPA call would hold (b, h, s, s) scores
        out = kernel("blocked 256")(q64, k64, v64, mask)
    else:
        out = sdpa(q64, k64, v64, mask, SDPBackend.MATH)
    return [out.detach(), *torch.autograd.grad(out, (q64, k64, v64), grad.double())]


def attempt(option: Callable, q, k, v, mask, grad, backward: bool) -> list[torch.Tensor]:
    if not backward:
        with torch.no_grad():
            return [option(q, k, v, mask)]
    out = option(q, k, v, mask)
    return [out.detach(), *torch.autograd.grad(out, (q, k, v), grad)]


def matmul_rate() -> float:
    """GFLOP/s of SmolLM2-135M's step products (full fine-tune, fp32) on this machine, now."""
    with torch.device("meta"):
        linears = model_linears(smollm2_135m(), trains=True)
    products = step_products(linears, probe_tokens(linears))
    return sum(p.flops for p in products) / time_products(products, torch.float32) / 1e9


def measure(shape: str, kind: str, options: list[str], rounds: int) -> list[dict]:
    b, s = SHAPES[shape]
    torch.manual_seed(0)
    q = torch.randn(b, HEADS, s, HEAD_DIM, requires_grad=True)
    k, v = (torch.randn(b, KV_HEADS, s, HEAD_DIM, requires_grad=True) for _ in range(2))
    grad = torch.randn(b, HEADS, s, HEAD_DIM)
    doc = document_ids(b, s) if kind == "documents" else None
    mask = None if doc is None else document_causal_mask(doc)
    want = reference(q, k, v, mask, grad)
    scale = max(t.abs().max().item() for t in want)
    n_pairs = pairs(mask, b, s)
    rows, runnable = {}, {}
    for name in options:
        if name == "sdpa, causal as a bool mask" and kind != "causal":
            continue
        if name.endswith("by row") and (kind == "causal" or b == 1):  # the same as without "by row"
            continue
        row = rows[name] = {"shape": shape, "batch": b, "seq": s, "mask": kind, "option": name}
        option = OPTIONS[name]
        try:
            if name == "sdpa MATH" and b * HEADS * s * s * 4 * 3 / 2**30 > MATH_MAX_GIB:
                raise MemoryError(f"skipped: its (b, h, s, s) scores would need over {MATH_MAX_GIB} GiB")
            if option is None:
                option, row["compile_s"] = flex_option(mask, doc, b, s)
            got = attempt(option, q, k, v, mask, grad, backward=True)
            has_backward = True
        except NotImplementedError as e:  # flex_attention: no backward on CPU
            got, has_backward = attempt(option, q, k, v, mask, grad, backward=False), False
            row["no_backward"] = str(e).splitlines()[0]
        except (RuntimeError, MemoryError) as e:
            row["error"] = str(e).splitlines()[0][:200]
            continue
        diffs = [(g.double() - w).abs().max().item() for g, w in zip(got, want)]
        row["max_abs_diff"] = dict(zip(("out", "dq", "dk", "dv"), (float(f"{x:.3g}") for x in diffs)))
        row["exact"] = max(diffs) <= EXACT * scale and has_backward
        runnable[name] = (option, has_backward)
    best = {name: [float("inf"), float("inf")] for name in runnable}
    for _ in range(rounds):
        for name, (option, has_backward) in runnable.items():
            for backward in (False, True) if has_backward else (False,):
                start = time.perf_counter()
                attempt(option, q, k, v, mask, grad, backward)
                best[name][backward] = min(best[name][backward], time.perf_counter() - start)
    flops = 12 * HEAD_DIM * HEADS * n_pairs
    for name, (fwd, both) in best.items():
        rows[name] |= {"fwd_ms": round(fwd * 1e3, 2), "fwd_bwd_ms": round(both * 1e3, 2) if both < 1e9 else None,
                       "gflop_fwd_bwd": round(flops / 1e9, 2), "pairs": n_pairs}  # fmt: skip
        if both < 1e9:
            rows[name]["gflop_s"] = round(flops / both / 1e9, 1)
    return list(rows.values())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="4x512 only, one round: plumbing, not figures")
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--options", nargs="+", choices=list(OPTIONS), default=list(OPTIONS))
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (8k: at most --rounds-8k)")
    parser.add_argument("--rounds-8k", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--note", default="", help="the results file's note")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "results" / "attention.json"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    shapes, rounds = (["4x512"], 1) if args.quick else (args.shapes, args.rounds)
    load_before, others_before = load1(), others_cores(1.0)
    rate_before = matmul_rate()
    print(
        f"step matmul rate {rate_before:.1f} GFLOP/s; load {load_before}, others {others_before} cores",
        flush=True,
    )
    rows = []
    for shape in shapes:
        for kind in ("causal", "documents"):
            n = min(rounds, args.rounds_8k) if SHAPES[shape][1] > 4096 else rounds
            for row in measure(shape, kind, args.options, n):
                rows.append(row)
                print(row, flush=True)
    rate = max(rate_before, matmul_rate())
    timed = {(r["shape"], r["mask"], r["option"]): r.get("fwd_bwd_ms") for r in rows}
    for row in rows:
        if "gflop_fwd_bwd" in row:
            row["bound_ms"] = round(row["gflop_fwd_bwd"] / rate * 1e3, 2)
        before = timed.get((row["shape"], row["mask"], today(row["shape"], row["mask"])))
        if before and row.get("fwd_bwd_ms"):
            row["speedup_vs_today"] = round(before / row["fwd_bwd_ms"], 2)
    others_after = others_cores(1.0)
    worst = max(x for x in (others_before, others_after, 0.0) if x is not None)
    write_results(
        args.out, "attention", rows, args.note, quick=args.quick, threads=args.threads,
        matmul_gflop_s=round(rate, 1), load1_before=load_before, load1_after=load1(),
        others_cores=[others_before, others_after], contended=worst > 0.2,
        shipped=ca.CPU_KERNELS, fastest=kernel_table(rows),
    )  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
