"""What glibc's heap keeps beside a forward's saved activations, at 2k, 4k and 8k tokens.

    python benchmarks/heap_retention.py [--lengths 2048 4096 8192] [--layers 16] [--methods full lora]

The memory plan's allocator term (`ftune.planning.plan.CPU_ALLOCATOR_SHARE`) is a share of a step's
transient memory. This checks what that share is a share of. glibc maps a block of 32 MiB or more
on its own and unmaps it when freed; smaller blocks come from its heap, which keeps what is freed.
At 8k tokens SmolLM2-135M's feed-forward activations (8192 x 1536 x 4 bytes) are mapped, the
residual-width ones (8192 x 576 x 4) are not. If the heap kept a share of the heap-served bytes
only, the kept share of all saved bytes would halve at 8k; it does not.

One packed row (documents of 100-900 tokens, the packed-document mask, as the memory plan's long
runs), SmolLM2-135M's layer sizes, fp32, random weights, a forward with autograd on, after a freed
31 MiB block has raised glibc's mmap threshold to its ceiling, as a step's loss does. After each
layer: glibc's `mallinfo2` (the bytes in use, heap and mapped, and the heap's free bytes). Per
layer, the mean over the layers after the first (a layer strands whole freed blocks, one or a few): what the layer added to the bytes in use
(its saved activations), the part of those that is mapped, and what it added to the heap's free
bytes. Each length and method runs in `--repeats` fresh processes (the shares: their mean). Linux with glibc 2.33 or later only.
Writes benchmarks/results/heap_retention.json, which benchmarks/figures/report.py renders into
docs/memory.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from glibc_heap import heap_bytes  # noqa: E402
from results_file import load1, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "heap_retention.json"
MIB = 2**20
# Figures that differ between fresh processes (the rest are sizes): the rows give their mean.
AVERAGED = ("heap_free_mib_per_layer", "kept_share_of_saved", "kept_share_of_heap_served")
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def child(seq: int, layers: int, method: str) -> dict:
    """Run the forward in this process; per layer, the mean growth of the heap's figures."""
    import torch

    from ftune.models.smollm2 import smollm2
    from ftune.modules.masks import document_causal_mask
    from ftune.peft import apply_lora

    torch.manual_seed(0)
    model = smollm2(vocab_size=49152, num_layers=layers, num_heads=9, num_kv_heads=3, embed_dim=576,
                    intermediate_dim=1536, max_seq_len=8192)  # fmt: skip
    if method == "lora":
        apply_lora(model, targets=LORA_TARGETS, rank=16, alpha=32)
    lengths = torch.randint(100, 900, (seq // 100,), generator=torch.Generator().manual_seed(seq)).tolist()
    lengths = [n for i, n in enumerate(lengths) if sum(lengths[:i]) < seq]
    lengths[-1] -= sum(lengths) - seq
    doc = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))[None]  # (1, seq)
    mask = document_causal_mask(doc)
    pos = torch.cat([torch.arange(n) for n in lengths])[None]
    h = model.tok_embeddings(torch.randint(0, 49152, (1, seq)))
    if method == "lora":  # frozen embedding: the layers' inputs need grad for their activations to be saved
        h = h.detach().requires_grad_()
    # As a training step leaves glibc: its first freed blocks (the loss's logits) raise the mmap threshold
    # to its 32 MiB ceiling. A fresh process maps from 128 KiB and raises it as mapped blocks are freed.
    torch.empty(31 * MIB // 4).fill_(0)  # mapped, then freed at once
    before, grew = heap_bytes(), []
    for layer in model.layers:
        h = layer(h, input_pos=pos, mask=mask)
        after = heap_bytes()
        grew.append([a - b for a, b in zip(after, before)])
        before = after
    saved, mapped, free = (statistics.mean(g[i] for g in grew[1:]) for i in range(3))
    return {"method": method, "tokens": seq, "documents": len(lengths), "layers": layers,
            "saved_mib_per_layer": round(saved / MIB, 1), "mapped_mib_per_layer": round(mapped / MIB, 1),
            "heap_free_mib_per_layer": round(free / MIB, 1), "kept_share_of_saved": round(free / saved, 3),
            "kept_share_of_heap_served": round(free / (saved - mapped), 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per method and length")
    parser.add_argument("--methods", nargs="+", choices=["full", "lora"], default=["full", "lora"])
    parser.add_argument("--child", nargs=3, metavar=("SEQ", "LAYERS", "METHOD"), help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(int(args.child[0]), int(args.child[1]), args.child[2])))
        return
    rows = []
    for method in args.methods:
        for seq in args.lengths:
            load = load1()
            cmd = [sys.executable, __file__, "--child", str(seq), str(args.layers), method]
            runs = [json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[-1])
                    for _ in range(args.repeats)]  # fmt: skip
            row = runs[0] | {k: round(statistics.mean(r[k] for r in runs), 3) for k in AVERAGED}
            row |= {f"{k}_runs": [r[k] for r in runs] for k in AVERAGED}
            rows.append({**row, "load1_before": load})
            print(rows[-1], flush=True)
    write_results(args.results, "heap_retention", rows,
                  note=f"A forward of {args.layers} layers a run, the mean over layers 2-{args.layers}; "
                  f"what the heap kept is the mean of {args.repeats} fresh processes (each one's in `..._runs`).")  # fmt: skip


if __name__ == "__main__":
    main()
