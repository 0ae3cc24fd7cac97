"""The peak memory a training config needs per rank, term by term, from the config alone.

`plan_config(cfg, recipe, world_size)` reads the recipe's settings (batch, sequence length, dtype,
activation checkpointing, ...), builds the model (and a KD teacher) on the meta device with the
config's adapters to count parameters exactly, and adds up the terms of `ftune.planning.terms` at
the step's peak. The constants measured on CPU (the process's fixed overhead, the allocator's
share) are named below with where they come from: benchmarks/memory_plan.py checks the whole
prediction against real runs (docs/memory.md shows the table).

Tensor parallel (`Parallelism.tp`) splits the layers' weights, gradients, optimizer state and most of
their activations over the tp ranks (the embeddings and norms stay whole on each: HSDP over tp);
context parallel (`.cp`) splits the activations of each sequence, and FSDP2 shards over dp x cp.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ftune import registry
from ftune.checkpointing import meta_model
from ftune.config.instantiate import instantiate
from ftune.config.model_source import is_checkpoint_model
from ftune.config.recipe_file import recipe_settings
from ftune.planning import terms
from ftune.planning.shapes import GIB, ModelShape, dtype_bytes, shape_of
from ftune.settings.dist import mesh_problems

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "auto": torch.float32}

# The process's fixed overhead on CPU: Python, torch, the tokenizer, the dataset and the loader.
# benchmarks/memory_plan.py's run "sft-full-tiny" (a model too small to count) peaks at 0.63 GiB,
# of which the plan's other terms are 0.10.
CPU_RUNTIME_GIB = 0.53
# glibc keeps freed activation blocks in its heap while backward allocates gradients of other sizes,
# so the peak RSS holds more than the live tensors: this share of the step's transient memory
# (activations, loss blocks). Set before the runs of benchmarks/memory_plan.py and kept: there, what
# the live terms leave unexplained is 0.14-0.29 of the transient memory without activation
# checkpointing (more with it, where the recompute churns the heap). The share is of all of it, the
# blocks glibc maps (32 MiB or more) included: a mapped block goes back to the kernel when freed, but
# what the heap keeps comes from the tensors it serves, and depends on which of them a layer frees
# and when, not on the mapped ones' size. benchmarks/heap_retention.py measures it layer by layer: at
# 8k tokens, where the feed-forward's activations are mapped, no larger a share of all the saved bytes
# than at 2k and 4k, and for LoRA about twice the share of the heap-served bytes alone.
CPU_ALLOCATOR_SHARE = 0.25


@dataclass(frozen=True)
class Parallelism:
    """How a run is spread over ranks: FSDP2 over data-parallel rows, tensor or context parallel within.

    Attributes:
        world_size: ranks.
        fsdp: parameters, gradients and optimizer state are sharded over the ranks (the
            distributed recipes), else each rank holds them whole.
        tp: tensor-parallel ranks (``tensor_parallel_dim``): the layers' projections split over them.
        cp: context-parallel ranks (``context_parallel_dim``): each sequence split over them.
    """

    world_size: int = 1
    fsdp: bool = False
    tp: int = 1
    cp: int = 1

    def __post_init__(self) -> None:
        if problems := mesh_problems(
            self.world_size, tensor_parallel_dim=self.tp, context_parallel_dim=self.cp
        ):
            raise ValueError(f"memory plan: {problems[0]}")


@dataclass(frozen=True)
class Workload:
    """What a step computes, read from the recipe's settings and the config.

    Attributes:
        method: "sft", "dpo", "kd" or "grpo".
        rows: sequences in a micro-batch (DPO: chosen and rejected, 2 a pair; GRPO: batch x group).
        seq: tokens a sequence (the most the config allows).
        dtype: parameter and activation dtype.
        activation_checkpointing: recompute each layer in backward.
        activation_offloading: saved activations go to host memory (a GPU setting).
        optimizer: the optimizer's `_component_`; momentum its momentum (SGD).
        num_chunks: blocks the loss computes its logits in.
        reference_copy: a separate frozen reference model (full DPO, full GRPO with beta > 0).
        rollout_rows, rollout_len: GRPO's sampling batch and its KV cache's length.
        device: "cpu", "cuda", ...
        batch_size, grad_accum_steps: the settings' (what a smaller micro-batch changes).
        loss_tokens: the tokens the loss projects to the vocabulary (0: all; GRPO: the completions').
        packed: rows are packed documents (``dataset.packed``): attention reads the batch's one
            document mask in every layer, not a causal mask each layer builds.
    """

    method: str
    rows: int
    seq: int
    dtype: torch.dtype
    activation_checkpointing: bool = False
    activation_offloading: bool = False
    optimizer: str = "torch.optim.AdamW"
    momentum: float | None = None
    num_chunks: int = 8
    reference_copy: bool = False
    rollout_rows: int = 0
    rollout_len: int = 0
    device: str = "cpu"
    batch_size: int = 1
    grad_accum_steps: int = 1
    loss_tokens: int = 0
    packed: bool = False


@dataclass
class Plan:
    """A predicted peak per rank, and the terms it is the sum of (bytes).

    Attributes:
        terms: name -> bytes, in the order they add up.
        workload: what was planned.
        shape: the model's sizes and counts.
        parallelism: how it is spread.
    """

    terms: dict[str, float]
    workload: Workload
    shape: ModelShape
    parallelism: Parallelism
    teacher: ModelShape | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def peak_gib(self) -> float:
        return sum(self.terms.values()) / GIB

    def terms_gib(self) -> dict[str, float]:
        return {k: round(v / GIB, 3) for k, v in self.terms.items()}


def plan(
    shape: ModelShape,
    work: Workload,
    parallel: Parallelism = Parallelism(),
    *,
    teacher: ModelShape | None = None,
) -> Plan:
    """Add up a step's peak memory per rank.

    The peak is reached in backward after the first optimizer step: the weights and optimizer
    state persist; the saved activations and the loss's blocks are there when backward starts,
    and the gradients it makes take the room of the activations it frees. GRPO's sampling (the
    KV cache, no autograd) peaks apart from training; the larger of the two counts. On CPU,
    glibc's heap keeps a share of the transient memory (activations, loss blocks) beyond the
    live tensors (`CPU_ALLOCATOR_SHARE`).
    """
    e = dtype_bytes(work.dtype)
    shard = parallel.world_size if parallel.fsdp else 1
    tp, cp = parallel.tp, parallel.cp
    # Beside tensor parallel the embeddings (and norms, not counted apart) are split over tp only.
    root = shape.vocab_size * shape.embed_dim * (1 if shape.tied_output else 2) if tp > 1 else 0

    def sharded(total: float, elem: float) -> float:
        return (total - root * elem) / shard + root * elem / tp

    tokens = work.rows * work.seq
    t: dict[str, float] = {}
    notes: list[str] = []
    if work.device == "cpu":
        t["runtime (Python, torch, data)"] = CPU_RUNTIME_GIB * GIB
    t["weights"] = sharded(terms.weight_bytes(shape, e), e)
    if shard > 1:  # FSDP2 all-gathers one layer's parameters at a time around its forward and backward
        t["weights: one layer gathered"] = terms.weight_bytes(shape, e) / shape.num_layers / tp
        # the root (embedding, final norm) stays gathered after forward: the loss uses it at once
        t["weights: root gathered (embedding)"] = shape.vocab_size * shape.embed_dim * e
        if work.device == "cpu" and tp > 1:
            t["checkpoint pages read (tensor parallel)"] = terms.tensor_parallel_checkpoint_bytes(
                shape, e, tp, root * e
            )
        elif work.device == "cpu":
            # Every rank loads the whole checkpoint and builds the whole model before FSDP2 shards it:
            # the state dict stays referenced by the recipe, and the freed unsharded model's pages
            # stay in the process's heap (measured at world size 2: benchmarks/memory_plan.py).
            t["checkpoint and unsharded model (before sharding)"] = 2 * terms.weight_bytes(shape, e)
    if work.reference_copy:
        t["reference model"] = terms.weight_bytes(shape, e) / shard
    if teacher is not None:
        t["teacher weights"] = terms.weight_bytes(teacher, e) / shard  # the distributed recipe shards it too
    full = shape.trainable >= shape.vocab_size * shape.embed_dim  # the embedding trains (no adapters)
    state = terms.optimizer_state_bytes(shape, e, work.optimizer, work.momentum)
    t["optimizer state"] = sharded(state, state / max(shape.trainable, 1)) if full else state / shard
    layer_shape, rows, seq = _split_layers(shape, tp), work.rows, work.seq
    step: dict[str, float] = {}
    seq = -(-seq // cp)  # context parallel: this rank's slice of each sequence
    layer = terms.layer_activation_blocks(layer_shape, rows, seq, e, packed=work.packed)
    if work.activation_offloading and work.device != "cpu":
        transient = list(layer)
        step["activations (offloaded: one layer on the device)"] = _total(transient)
    elif work.activation_checkpointing:  # each layer's input, and one layer recomputed at a time
        transient = [(rows * seq * shape.embed_dim * e, shape.num_layers), *layer]
        step["activations (checkpointed)"] = _total(transient)
    else:
        transient = [(size, n * shape.num_layers) for size, n in layer]
        step["activations"] = _total(transient)
    acts = _total(transient)
    if work.packed:  # context parallel: this rank's queries against every key
        transient.append((terms.packed_mask_bytes(rows, seq, work.seq), 1))
        step["attention mask (packed documents)"] = transient[-1][0]
    if cp > 1:  # each layer keeps the gathered keys and values; the loss reads the gathered hidden states
        gathered = [
            (rows * (work.seq - seq) * layer_shape.kv_dim * e, 2 * shape.num_layers),
            (tokens * shape.embed_dim * e, 1),
        ]
        transient += gathered
        step["context parallel: gathered keys, values, hidden states"] = _total(gathered)
    copies = 4 if work.method == "kd" else 3  # KD: the teacher's block of logits beside the student's
    loss_tokens = work.loss_tokens * work.rows // max(work.rollout_rows, 1) if work.loss_tokens else tokens
    loss = terms.loss_blocks(shape, loss_tokens, work.num_chunks, trains_output=full, copies=copies)
    transient += loss
    step["loss blocks"] = _total(loss)
    if teacher is not None:
        transient.append((terms.hidden_bytes(teacher, tokens, e), 1))
        step["teacher hidden states"] = transient[-1][0]
    # Backward makes the gradients layer by layer while it frees that layer's activations: the
    # embedding's comes first (the loss made it), the layers' add to the peak only where they
    # outgrow the activations already freed. Then the optimizer step holds them all, no activations.
    grads = sharded(terms.gradient_bytes(shape, e), e) if full else terms.gradient_bytes(shape, e) / shard
    embedding = (
        shape.vocab_size * shape.embed_dim * e * (1 if shape.tied_output else 2) / (tp if tp > 1 else shard)
        if full
        else 0.0
    )
    step["gradients (beyond the activations freed)"] = embedding + max(0.0, grads - embedding - acts)
    if shard > 1:
        step["gradients: one layer unsharded"] = terms.gradient_bytes(shape, e) / shape.num_layers / tp
    train, sampling_peak = sum(step.values()), False
    if work.method == "grpo":
        rollout = terms.kv_cache_bytes(shape, work.rollout_rows, work.rollout_len, e)
        rollout += terms.inference_layer_bytes(shape, work.rollout_rows, 1, e)
        rollout += work.rollout_rows * shape.vocab_size * 4  # one step's fp32 logits
        kv = terms.kv_cache_bytes(shape, work.rollout_rows, work.rollout_len, e)
        if rollout > train:
            step, sampling_peak = {"rollout KV cache (sampling peak)": rollout}, True
        else:
            notes.append(
                f"sampling peaks lower: {rollout / GIB:.2f} GiB in place of the update's {train / GIB:.2f} GiB "
                f"(its KV cache {kv / GIB:.2f} GiB: {shape.num_layers} layers x 2 x {work.rollout_rows} rows x "
                f"{work.rollout_len} positions x {shape.kv_dim})"
            )
    t.update(step)
    if work.device == "cpu":  # a share of the transient tensors the heap keeps once freed
        t["allocator (CPU heap)"] = CPU_ALLOCATOR_SHARE * (rollout if sampling_peak else _total(transient))
    return Plan(terms=t, workload=work, shape=shape, parallelism=parallel, teacher=teacher, notes=notes)


def _total(blocks: list[tuple[float, int]]) -> float:
    return float(sum(size * n for size, n in blocks))


def _split_layers(shape: ModelShape, tp: int) -> ModelShape:
    """The part of each layer one tensor-parallel rank holds: its heads and its slice of the feed-forward."""
    if tp == 1:
        return shape
    kv_heads = shape.kv_dim * shape.num_heads // shape.q_dim
    if shape.num_heads % tp or kv_heads % tp or shape.ffn_dim % tp:
        raise ValueError(
            f"memory plan: tensor_parallel_dim={tp} does not divide the model's {shape.num_heads} heads, "
            f"{kv_heads} key/value heads and feed-forward width {shape.ffn_dim}: each tensor-parallel rank "
            "holds whole heads. Set tensor_parallel_dim to a divisor of all three."
        )
    return replace(shape, q_dim=shape.q_dim // tp, kv_dim=shape.kv_dim // tp, ffn_dim=shape.ffn_dim // tp,
                   num_heads=shape.num_heads // tp)  # fmt: skip


def _component(node: Any) -> str:
    return str(node.get("_component_", "")) if node is not None and hasattr(node, "get") else ""


def workload_of(cfg: Any, settings: Any) -> Workload:
    """The step a config runs, from the recipe's settings `settings` and the config's sections."""
    node = cfg.node
    loss = _component(node.get("loss"))
    method = "sft"
    if node.get("teacher_model") is not None:
        method = "kd"
    elif node.get("rewards") is not None or hasattr(settings, "group_size"):
        method = "grpo"
    elif "DPO" in loss:
        method = "dpo"
    tokenizer = node.get("tokenizer") or {}
    seq = int(tokenizer.get("max_seq_len") or 2048)
    batch = settings.batch_size
    rows, rollout_rows, rollout_len = batch, 0, 0
    full = node.get("peft") is None
    reference = False
    if method == "dpo":
        rows = 2 * batch
        reference = full
    if method == "grpo":
        prompt = int((node.get("dataset") or {}).get("max_prompt_len") or seq)
        rollout_rows = batch * settings.group_size
        rollout_len = prompt + settings.max_new_tokens
        rows, seq = rollout_rows, rollout_len
        beta = (node.get("loss") or {}).get("beta", 0.04)
        reference = full and bool(beta)
    optimizer = node.get("optimizer") or {}
    return Workload(
        method=method,
        rows=rows,
        seq=seq,
        dtype=DTYPES.get(str(settings.dtype), torch.float32),
        activation_checkpointing=bool(settings.activation_checkpointing),
        activation_offloading=bool(getattr(settings, "activation_offloading", False)),
        optimizer=_component(optimizer) or "torch.optim.AdamW",
        momentum=optimizer.get("momentum") if hasattr(optimizer, "get") else None,
        num_chunks=int((node.get("loss") or {}).get("num_chunks") or 1),
        reference_copy=reference,
        rollout_rows=rollout_rows,
        rollout_len=rollout_len,
        device=str(settings.device) if str(settings.device) != "auto" else "cpu",
        batch_size=batch,
        grad_accum_steps=settings.grad_accum_steps,
        loss_tokens=rollout_rows * settings.max_new_tokens if method == "grpo" else 0,
        packed=bool((node.get("dataset") or {}).get("packed", False)),
    )


def model_of(cfg: Any, section: str, checkpointer: str, dtype: torch.dtype) -> torch.nn.Module:
    """The config's `section` model on the meta device (its builder, or its checkpoint's config.json)."""
    node = cfg.node
    ckpt = node.get(checkpointer)
    folder = ckpt.get("checkpoint_dir") if ckpt is not None and hasattr(ckpt, "get") else None
    section_node = node.get(section)
    if section_node is not None and not is_checkpoint_model(section_node):
        folder = (
            None  # the config's builder sizes the model: the plan reads no file (ftune validate checks it)
        )
    return meta_model(folder, section_node, dtype=dtype)


def model_shape(cfg: Any, section: str, checkpointer: str, dtype: torch.dtype, *, peft: bool) -> ModelShape:
    """The shape of the config's `section` model (built on the meta device, adapters applied)."""
    node = cfg.node
    model = model_of(cfg, section, checkpointer, dtype)
    quantize = False
    if peft and node.get("peft") is not None:
        peft_node = node.peft
        quantize = bool(peft_node.get("quantize_base", False))
        with torch.device("meta"):  # QLoRA's NF4 is counted by shape_of, not built on meta
            instantiate(peft_node, model, quantize_base=False) if quantize else instantiate(peft_node, model)
    return shape_of(model, quantize_base=quantize)


def plan_config(cfg: Any, recipe: str | Path, *, world_size: int = 1, fsdp: bool | None = None) -> Plan:
    """The plan of a loaded config (`ftune.config.load_config`) run by `recipe`.

    Args:
        cfg: the config, overrides applied.
        recipe: a shipped recipe's name or a recipe file; its settings are read from the config
            (``cfg.settings(SETTINGS)``: the keys, types and ranges `ftune validate` checks).
        world_size: ranks (torchrun's --nproc_per_node x nodes).
        fsdp: shard parameters, gradients and optimizer state over the ranks (default: when
            world_size > 1, as the distributed recipes do).
    """
    file = Path(recipe) if str(recipe).endswith(".py") else registry.RECIPES[str(recipe)].file
    settings = cfg.settings(recipe_settings(file))
    work = workload_of(cfg, settings)
    shape = model_shape(cfg, "model", "checkpointer", work.dtype, peft=True)
    teacher = None
    if work.method == "kd":
        teacher = model_shape(cfg, "teacher_model", "teacher_checkpointer", work.dtype, peft=False)
    split = (getattr(settings, "tensor_parallel_dim", 1), getattr(settings, "context_parallel_dim", 1))
    tp, cp = split if world_size > 1 else (1, 1)  # one device: the recipe ignores them
    parallel = Parallelism(world_size=world_size, fsdp=world_size > 1 if fsdp is None else fsdp, tp=tp, cp=cp)
    return plan(shape, work, parallel, teacher=teacher)
