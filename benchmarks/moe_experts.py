"""How to compute mixture-of-experts SwiGLU experts on CPU: forward + backward time of five ways.

    python benchmarks/moe_experts.py                                   # prints a table
    python benchmarks/moe_experts.py --json benchmarks/results/moe_experts.json

Shapes: "tiny" is the test model's layer (8 experts, top 2, 64 -> 32), "30b_a3b_slice" one layer of
Qwen3-30B-A3B (128 experts, top 8, 2048 -> 768) on a short batch. Every way is first checked to
give the same output and weight gradients as the per-expert loop of transformers' modelling code.
"tiny_model" is a whole training step (forward, backward; cross-entropy + aux loss) of
`qwen3_moe_tiny` on 4 x 128 tokens, its experts computed by grouped_mm, sorted_loop or hf_loop.

- hf_loop: transformers' eager loop: per hit expert, `torch.where` its tokens, gather, 2 linears, index_add.
- sorted_loop: sort (token, choice) pairs by expert once, one mm per expert on its contiguous slice.
- grouped_mm: the same sort, one `torch._grouped_mm` per projection (ftune's choice).
- padded_bmm: the sort, every group padded to the largest, one `bmm` per projection.
- dense: every expert on every token (einsum), the unchosen ones weighted 0: E/k times the FLOPs.
"""

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from results_file import load1, write_results

from ftune.models.qwen3_moe import qwen3_moe_tiny
from ftune.modules.moe_experts import grouped_matmul, sort_by_expert

MODEL_WAYS = {"grouped_mm": "grouped_mm", "sorted_loop": "loop", "hf_loop": None}
SHAPES = {
    "tiny": dict(num_experts=8, top_k=2, embed_dim=64, hidden_dim=32, tokens=512),
    "30b_a3b_slice": dict(num_experts=128, top_k=8, embed_dim=2048, hidden_dim=768, tokens=512),
}


def hf_loop(x, idx, w, gate_up, down):
    out = torch.zeros_like(x)
    for e in idx.unique().tolist():
        tok, pos = torch.where(idx == e)  # the tokens that chose e, and in which of their k slots
        g, u = F.linear(x[tok], gate_up[e]).chunk(2, dim=-1)
        y = F.linear(F.silu(g) * u, down[e]) * w[tok, pos, None]
        out.index_add_(0, tok, y)
    return out


def _sorted(backend: str):
    def run(x, idx, w, gate_up, down):
        groups = sort_by_expert(idx, gate_up.shape[0])
        rows = x[groups.token]
        g, u = grouped_matmul(rows, gate_up, groups.offsets, backend).chunk(2, dim=-1)
        y = grouped_matmul(F.silu(g) * u, down, groups.offsets, backend)
        y = y * w.reshape(-1)[groups.order, None]
        return torch.zeros_like(x).index_add_(0, groups.token, y)

    return run


def padded_bmm(x, idx, w, gate_up, down):
    num_experts = gate_up.shape[0]
    groups = sort_by_expert(idx, num_experts)
    counts = torch.diff(groups.offsets, prepend=groups.offsets.new_zeros(1)).long()
    starts = groups.offsets.long() - counts
    slot = torch.arange(groups.order.numel()) - torch.repeat_interleave(starts, counts)  # place in group
    expert = torch.repeat_interleave(torch.arange(num_experts), counts)
    padded = x.new_zeros(num_experts, int(counts.max()), x.shape[1])
    padded = padded.index_put((expert, slot), x[groups.token])  # (E, C, H)
    g, u = torch.bmm(padded, gate_up.transpose(1, 2)).chunk(2, dim=-1)  # (E, C, I) each
    y = torch.bmm(F.silu(g) * u, down.transpose(1, 2))[expert, slot]  # (T * k, H)
    y = y * w.reshape(-1)[groups.order, None]
    return torch.zeros_like(x).index_add_(0, groups.token, y)


def dense(x, idx, w, gate_up, down):
    g, u = torch.einsum("th,eoh->teo", x, gate_up).chunk(2, dim=-1)  # (T, E, I) each
    y = torch.einsum("tei,ehi->teh", F.silu(g) * u, down)  # (T, E, H)
    mix = torch.zeros(x.shape[0], gate_up.shape[0], dtype=x.dtype).scatter(1, idx, w)  # (T, E)
    return torch.einsum("teh,te->th", y, mix)


WAYS = {
    "hf_loop": hf_loop,
    "sorted_loop": _sorted("loop"),
    "grouped_mm": _sorted("grouped_mm"),
    "padded_bmm": padded_bmm,
    "dense": dense,
}


def inputs(shape: dict, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    e, k, h, i, t = (shape[n] for n in ("num_experts", "top_k", "embed_dim", "hidden_dim", "tokens"))
    x = torch.randn(t, h, generator=gen)
    probs = torch.randn(t, e, generator=gen).softmax(-1)
    w, idx = probs.topk(k, dim=-1)
    gate_up = (torch.randn(e, 2 * i, h, generator=gen) * h**-0.5).requires_grad_()
    down = (torch.randn(e, h, i, generator=gen) * i**-0.5).requires_grad_()
    return x.requires_grad_(), idx, w / w.sum(-1, keepdim=True), gate_up, down


def step(way, x, idx, w, gate_up, down, grad):
    for p in (x, gate_up, down):
        p.grad = None
    out = way(x, idx, w, gate_up, down)
    out.backward(grad)
    return out.detach(), gate_up.grad, down.grad, x.grad


def check(args: tuple, ways: list[str]) -> None:
    """Every way gives the reference's output and gradients (fp32, relative to the largest entry)."""
    grad = torch.randn_like(args[0])
    ref = [t.clone() for t in step(hf_loop, *args, grad)]
    for name in ways:
        for a, b in zip(step(WAYS[name], *args, grad), ref, strict=True):
            err = ((a - b).abs().max() / b.abs().max()).item()
            assert err < 1e-5, (name, err)


def seconds(way, args: tuple, repeats: int) -> float:
    grad = torch.randn_like(args[0])
    step(way, *args, grad)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(way, *args, grad)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def model_step_seconds(way: str, repeats: int) -> float:
    """One training step of the tiny model, its experts computed `way` (a MODEL_WAYS key)."""
    torch.manual_seed(0)
    model = qwen3_moe_tiny()
    for layer in model.layers:
        experts = layer.mlp.experts
        if MODEL_WAYS[way] is None:  # transformers' loop in place of the grouped products
            experts.forward = lambda x, i, w, e=experts: hf_loop(x, i, w, e.gate_up_proj, e.down_proj)
        else:
            experts.backend = MODEL_WAYS[way]
    tokens = torch.randint(0, 128, (4, 128), generator=torch.Generator().manual_seed(0))

    def run() -> None:
        model.zero_grad()
        logits = model(tokens)
        ce = F.cross_entropy(logits[:, :-1].reshape(-1, 128), tokens[:, 1:].reshape(-1))
        (ce + model.aux_loss_coef * model.aux_loss()).backward()

    run()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--shapes", nargs="+", default=[*SHAPES, "tiny_model"], choices=[*SHAPES, "tiny_model"]
    )
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads, one run each")
    parser.add_argument(
        "--ways", nargs="+", default=list(WAYS), choices=list(WAYS), help="hf_loop always runs"
    )
    parser.add_argument("--json", type=Path, help="also write the results file here")
    parser.add_argument("--note", default="", help="the results file's note")
    args = parser.parse_args()
    rows = []
    for shape_name in args.shapes:
        if shape_name == "tiny_model":
            for threads in args.threads:
                torch.set_num_threads(threads)
                times = {way: model_step_seconds(way, args.repeats) * 1e3 for way in MODEL_WAYS}
                for way, ms in times.items():
                    ratio = times["hf_loop"] / ms
                    rows.append({"shape": shape_name, "threads": threads, "way": way,
                                 "fwd_bwd_ms": round(ms, 2), "vs_hf_loop": round(ratio, 2)})  # fmt: skip
                    print(
                        f"{shape_name:14s} {threads}t {way:12s} {ms:9.2f} ms  {ratio:5.2f}x hf_loop",
                        flush=True,
                    )
            continue
        shape = SHAPES[shape_name]
        data = inputs(shape)  # once: drawing a 30B layer's weights takes tens of seconds
        check(data, args.ways)
        for threads in args.threads:
            torch.set_num_threads(threads)
            base = None
            for name in ["hf_loop", *(w for w in args.ways if w != "hf_loop")]:
                ms = seconds(WAYS[name], data, args.repeats) * 1e3
                base = ms if name == "hf_loop" else base
                rows.append({"shape": shape_name, **shape, "threads": threads, "way": name,
                             "fwd_bwd_ms": round(ms, 2), "vs_hf_loop": round(base / ms, 2)})  # fmt: skip
                print(
                    f"{shape_name:14s} {threads}t {name:12s} {ms:9.2f} ms  {base / ms:5.2f}x hf_loop",
                    flush=True,
                )
    if args.json:
        write_results(args.json, "moe_experts", rows, note=args.note, load_1min=load1(), dtype="float32")


if __name__ == "__main__":
    main()
