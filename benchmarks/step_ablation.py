"""Before/after of each training-speed optimization, measured inside one process.

    python benchmarks/step_ablation.py --method full --dtype fp32 [--rounds 3] [--threads 1]
    python benchmarks/step_ablation.py --method lora --results benchmarks/results/step_ablation.json

Runs the recipes' training step (forward, backward, clipping, AdamW) on SmolLM2-135M-Instruct with the benchmark's batch (demo
dataset packed into 4 x 512 tokens, ChunkedCrossEntropyLoss(8), AdamW, clipping at 1.0), and
switches the optimizations off one at a time:

- ``label_selection``: ``batch_loss`` projects only the labelled positions to the vocabulary
  (off: ``loss_fn.token_wise = False``, the whole ``[b, s, dim]`` goes to the loss);
- ``blocked_attention``: attention on CPU block by block over the keys each query block can see
  (off: ``attention.CPU_ATTENTION_FROM`` set past the sequence length, so SDPA gets the whole
  sequence);
- ``lean_backward``: RMSNorm and SwiGLU save only their inputs for backward and recompute the
  rest (off: both left to autograd);
- ``fp32_attention_backward`` (bf16 only): the blocked attention's backward recomputes in fp32
  (off: plain bf16 SDPA backward);
- ``lora_merged_weight`` (LoRA, fp32 only): the LoRA layer multiplies by the merged weight
  ``W + s·B·A`` (one GEMM forward, one for the input gradient; see ``ftune.peft.lora``)
  (off: the plain ``base(x) + scale * lora_b(lora_a(x))``).

Variants alternate step by step (round-robin), so load from other processes hits all of them
alike; each reports the median wall time and CPU time (this process, all threads) of its steps,
and the activation memory its forward saves for backward (exact: unique storages seen by a
saved-tensors hook, parameters excluded).
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch

from ftune import training
from ftune.checkpointing import load_hf
from ftune.datasets import demo_dataset
from ftune.models.smollm2 import smollm2_tokenizer
from ftune.modules import attention, cpu_attention
from ftune.peft import apply_lora
from ftune.peft.lora import LoRALinear
from ftune.peft.nf4 import frozen_linear
from ftune.training.step.token_loss import batch_loss

CPU = torch.device("cpu")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@contextmanager
def no_label_selection(loss_fn):
    loss_fn.token_wise = False
    try:
        yield
    finally:
        del loss_fn.token_wise  # back to the class attribute


@contextmanager
def no_blocked_attention():
    start = attention.CPU_ATTENTION_FROM
    attention.CPU_ATTENTION_FROM = 1 << 30
    try:
        yield
    finally:
        attention.CPU_ATTENTION_FROM = start


@contextmanager
def no_fp32_attention_backward():
    sdpa = cpu_attention._sdpa
    cpu_attention._sdpa = lambda q, k, v, mask, gqa: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=gqa
    )  # mask None: causal (cpu_attention's one-call kernel)
    try:
        yield
    finally:
        cpu_attention._sdpa = sdpa


@contextmanager
def no_lean_backward():
    from ftune.modules import RMSNorm, SwiGLU

    RMSNorm.lean_backward = SwiGLU.lean_backward = False
    try:
        yield
    finally:
        RMSNorm.lean_backward = SwiGLU.lean_backward = True


def _former_lora_forward(self: LoRALinear, x: torch.Tensor) -> torch.Tensor:
    return frozen_linear(x, self.weight, self.bias) + self.scale * self.lora_b(self.lora_a(self.dropout(x)))


@contextmanager
def no_lora_merged_weight():
    forward = LoRALinear.forward
    LoRALinear.forward = _former_lora_forward
    try:
        yield
    finally:
        LoRALinear.forward = forward


def saved_activation_mib(model, loss_fn, batch) -> float:
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    sizes: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            sizes[storage.data_ptr()] = storage.nbytes()
        # Detached: a saved *output* returned as is would hold its own grad_fn, a reference cycle
        # that keeps the whole graph alive. This forward is never backpropagated.
        return t.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_sum, _ = batch_loss(model, loss_fn, batch, device=CPU)
    del loss_sum
    return sum(sizes.values()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=["full", "lora"], default="full")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--rounds", type=int, default=3, help="measured steps per variant")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--ftune-home", type=Path, default=Path("/tmp/bench_home"))
    parser.add_argument(
        "--results", type=Path, default=None,
        help="write this setting's rows into the results file the docs are generated from (its other settings kept)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model_dir = args.ftune_home / "models" / "SmolLM2-135M-Instruct"
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    tokenizer = smollm2_tokenizer(str(model_dir), max_seq_len=512)
    dataset = demo_dataset(tokenizer, data_dir=str(args.ftune_home / "data" / "demo"), packed=True)
    batch = {k: torch.stack([torch.as_tensor(dataset[i][k]) for i in range(4)]) for k in dataset[0]}
    model = load_hf(model_dir, dtype=dtype).train()
    if args.method == "lora":
        apply_lora(model, targets=TARGETS, rank=16, alpha=32)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.01)
    loss_fn = training.ChunkedCrossEntropyLoss(8)

    switches = {
        "label_selection": lambda: no_label_selection(loss_fn),
        "blocked_attention": no_blocked_attention,
        "lean_backward": no_lean_backward,
    }
    if args.dtype == "bf16":
        switches["fp32_attention_backward"] = no_fp32_attention_backward
    if args.method == "lora" and args.dtype == "fp32":
        switches["lora_merged_weight"] = no_lora_merged_weight
    variants = {"all on": []} | {f"without {name}": [name] for name in switches} | {"all off": list(switches)}

    def step(variant: str, i: int) -> tuple[float, float]:
        with ExitStack() as stack:
            for name in variants[variant]:
                stack.enter_context(switches[name]())
            wall, cpu = time.perf_counter(), time.process_time()
            micro = [training.on_device(batch, CPU)]
            step_loss = training.StepLoss(micro, optimizer, step=i, device=CPU, per=training.per_token)
            loss_sum, count = batch_loss(model, loss_fn, micro[0], device=CPU)
            step_loss.scaled(training.Loss(loss_sum, count, {})).backward()
            step_loss.finish(torch.nn.utils.clip_grad_norm_(training.trainable_params(model), 1.0))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return time.perf_counter() - wall, time.process_time() - cpu

    memory = {}
    for variant in variants:
        with ExitStack() as stack:
            for name in variants[variant]:
                stack.enter_context(switches[name]())
            memory[variant] = saved_activation_mib(model, loss_fn, batch)
        step(variant, 0)  # warm-up
    times: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    for i in range(args.rounds):
        for variant in variants:
            times[variant].append(step(variant, i + 1))
            print(
                f"round {i + 1} {variant}: wall {times[variant][-1][0]:.2f} s, cpu {times[variant][-1][1]:.2f} s"
            )

    print(f"\n{args.method} {args.dtype}, {torch.get_num_threads()} threads, {args.rounds} steps per variant")
    print("| variant | wall s/step | cpu s/step | tok/s (wall) | tok/cpu-s | saved activations MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = []
    for variant in variants:
        wall = statistics.median(t[0] for t in times[variant])
        cpu = statistics.median(t[1] for t in times[variant])
        print(
            f"| {variant} | {wall:.2f} | {cpu:.2f} | {2048 / wall:.1f} | {2048 / cpu:.1f} | {memory[variant]:.0f} |"
        )
        rows.append({"variant": variant, "s_per_step": round(wall, 2), "tok_s": round(2048 / wall),
                     "saved_activations_mib": round(memory[variant])})  # fmt: skip
    if args.results:
        write_setting(
            args.results, f"{'LoRA' if args.method == 'lora' else 'full'}, {args.dtype}", rows, args.rounds
        )


def write_setting(path: Path, setting: str, rows: list[dict], rounds: int) -> None:
    """Replace `setting`'s rows of the results file (the other settings' rows, each with its commit, stay)."""
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from results_file import commit, write_results

    kept = (
        [r for r in json.loads(path.read_text())["rows"] if r["setting"] != setting] if path.is_file() else []
    )
    new = [{"setting": setting, **r, "commit": commit(), "rounds": rounds} for r in rows]
    workload = ("SmolLM2-135M-Instruct, the demo dataset packed into 4 x 512 tokens, one process, variants "
                "alternating step by step; median of the rounds; saved activations counted by a saved-tensors hook")  # fmt: skip
    previous = json.loads(path.read_text())["note"] if kept else ""
    note = "; ".join(x for x in (previous, f"{setting}: `{' '.join(['python', *sys.argv])}`") if x)
    write_results(path, "step_ablation", kept + new, note, workload=workload)


if __name__ == "__main__":
    main()
