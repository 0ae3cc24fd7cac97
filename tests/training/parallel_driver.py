"""Runs under torchrun: a few SGD steps of the tiny decoder on a dp x tp or dp x cp mesh (FSDP2 over
dp), for each case, in one process group; rank 0 writes {case: {"losses", "weights"} or the error}
to <out.pt>.

    torchrun --nproc_per_node N parallel_driver.py <out.pt> <case>...

A case is "tp<N>" or "cp<N>" (dp = world size / N), optionally ":packed" (rows of three documents,
a per-document mask), ":ac" (activation checkpointing) and "@<mutant>" of parallel_mutants.py.

`steps(model, batches, ...)` is also what the test runs on one device, so both runs compute the same
thing: the global batch's summed token loss over its labelled-token count.
"""

import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from parallel_mutants import mutant_patch  # noqa: E402

from ftune.models.smollm2 import smollm2  # noqa: E402
from ftune.modules.masks import document_causal_mask  # noqa: E402
from ftune.runtime.distributed import DistInfo  # noqa: E402
from ftune.runtime.mesh import device_mesh  # noqa: E402
from ftune.training import apply_activation_checkpointing, shard_model  # noqa: E402

SIZES = dict(vocab_size=96, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32, intermediate_dim=64)
BATCH, SEQ, STEPS = 4, 15, 3  # an odd length: context parallel pads the last slice


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = smollm2(**SIZES, max_seq_len=64)
    with torch.no_grad():  # non-trivial norms, so that a wrong norm gradient shows
        for name, p in model.named_parameters():
            p.uniform_(0.8, 1.2) if name.endswith("norm.weight") else p.normal_(0.0, 0.1)
    return model


def batches(packed: bool = False) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """STEPS global batches of (tokens, labels, document ids or None), labels -100 on a prompt-like
    prefix of each row; packed: each row holds documents of 4, 5 and 6 tokens (positions restart)."""
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(STEPS):
        tokens = torch.randint(0, SIZES["vocab_size"], (BATCH, SEQ), generator=g)
        labels = torch.roll(tokens, -1, dims=1)
        labels[:, -1] = -100
        for row in range(BATCH):
            labels[row, : row + 1] = -100  # a different number of labelled tokens per row
        documents = None
        if packed:
            documents = torch.tensor([0] * 4 + [1] * 5 + [2] * 6).expand(BATCH, -1)  # (b, 15)
            labels[:, [3, 8]] = -100  # a document's last token does not predict the next one's first
        out.append((tokens, labels, documents))
    return out


def steps(model, data, *, data_rank=0, data_ranks=1):
    """SGD steps on this rank's rows; returns the global mean loss of each step.

    Each rank's loss is its row group's summed loss over the global count, times the number of row
    groups: FSDP2 averages the gradients over dp (x cp), and tensor- and context-parallel ranks of one
    row group all compute that group's whole loss (context parallel's gather sums their shares back).
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for tokens, labels, documents in data:
        rows = slice(data_rank * BATCH // data_ranks, (data_rank + 1) * BATCH // data_ranks)
        tokens, labels = tokens[rows], labels[rows]
        count = (labels != -100).sum()  # this row group's; summed below
        inputs = {}
        if documents is not None:
            documents = documents[rows]
            starts = torch.cat([torch.zeros_like(documents[:, :1]), documents[:, 1:] != documents[:, :-1]], 1)
            first = torch.cummax(starts * torch.arange(SEQ), dim=1).values  # (b, s) each document's start
            inputs = {"input_pos": torch.arange(SEQ) - first, "mask": document_causal_mask(documents)}
        hidden = model.hidden(tokens, **inputs)
        logits = model.head.logits(hidden)
        loss_sum = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
        total = count.clone().float()
        figures = torch.stack([loss_sum.detach(), count.float()])
        if dist.is_initialized():
            dist.all_reduce(figures)  # every rank's share, duplicates of tp ranks included (ratio kept)
            counts = torch.zeros(data_ranks)
            counts[data_rank] = total
            dist.all_reduce(counts, op=dist.ReduceOp.MAX)
            total = counts.sum()
        (loss_sum / total * data_ranks).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)  # the norm of every gradient, on one mesh
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append((figures[0] / figures[1]).item())
    return losses


def run_case(case: str) -> dict:
    """One case's losses and full weights (every rank gathers; rank 0 keeps them)."""
    layout, _, mutant = case.partition("@")
    layout, *options = layout.split(":")
    size = int(layout[2:])
    kind = {"tp": "tensor_parallel_dim", "cp": "context_parallel_dim"}[layout[:2]]
    mesh = device_mesh(
        torch.device("cpu"), DistInfo(dist.get_rank(), dist.get_world_size(), 0), **{kind: size}
    )
    model = tiny_model()
    if "ac" in options:
        apply_activation_checkpointing(model)
    with mutant_patch(mutant):
        shard_model(model, mesh=mesh)
        losses = steps(
            model, batches("packed" in options), data_rank=mesh.data_rank, data_ranks=mesh.data_ranks
        )
    weights = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in model.state_dict().items()}
    return {"losses": losses, "weights": weights}


def main() -> None:
    out, *cases = sys.argv[1:]
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    results = {}
    for case in cases:
        try:
            results[case] = run_case(case)
        except Exception as e:  # a mutant may break the run: that kills it too
            results[case] = f"{type(e).__name__}: {e}"
        dist.barrier()
    if dist.get_rank() == 0:
        torch.save(results, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
