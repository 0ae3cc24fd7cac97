"""The terms of a training step's peak memory, as arithmetic on sizes (bytes; no torch, nothing built).

Each function is one term of `ftune.planning.plan`; tests/planning checks each against what a real
model allocates or saves (tiny models, the saved-tensor hooks of autograd).
"""

from __future__ import annotations

from ftune.modules.cpu_attention import CPU_ATTENTION_FROM, cpu_kernel
from ftune.planning.shapes import ModelShape

# NF4 (QLoRA): 4 bits a weight, plus one 8-bit scale per block of 64 and one fp32 scale per 256
# blocks (torchao's double quantization): 0.5 + 1/64 + 4/(64 * 256) bytes a weight.
NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)

# Optimizer state per trainable parameter, in bytes, by the `_component_` of the config's
# optimizer (ftune.training.optimizer_state_bytes measures them: docs/benchmarks.md).
# None: the parameter's own dtype size (torch's optimizers keep their state in it).
OPTIMIZER_STATES: dict[str, tuple[float, float | None]] = {
    # component: (state tensors of the parameter's dtype, fixed bytes per parameter)
    "torch.optim.AdamW": (2, None),
    "torch.optim.Adam": (2, None),
    "torch.optim.SGD": (1, None),  # momentum buffer (none at momentum=0: see optimizer_state_bytes)
    "torch.optim.RMSprop": (1, None),
    "torch.optim.Adagrad": (1, None),
    "ftune.training.AdamWBf16State": (0, 4.0),  # two bf16 moments
    "torchao.optim.AdamW8bit": (0, 2.0 + 2 * 4 / 256),  # two int8 moments, a fp32 scale a block of 256
    "torchao.optim.AdamW4bit": (0, 1.0 + 2 * 4 / 128),
}


def weight_bytes(shape: ModelShape, elem: int) -> float:
    """Every parameter in the model's dtype, QLoRA's NF4 base weights at their packed size."""
    return (shape.params - shape.frozen_quantized) * elem + shape.frozen_quantized * NF4_BYTES


def gradient_bytes(shape: ModelShape, elem: int) -> float:
    """One gradient a trainable parameter (LoRA: the adapters only), in the parameters' dtype."""
    return shape.trainable * elem


def tensor_parallel_checkpoint_bytes(shape: ModelShape, elem: int, tp: int, root: float) -> float:
    """The memory-mapped checkpoint's pages a tensor-parallel run's rank 0 reads before training (CPU).

    The model is built on the checkpoint's mapped tensors (no copy). Tensor parallel then scatters
    each layer's projections from rank 0 (DTensor's `distribute_tensor`), which reads every layer's
    weights whole, while FSDP2 copies each tensor-parallel rank's slice of the root (embedding,
    output, final norm: `root` bytes) from its own mapping. Measured at dp=1 x tp=3 (SmolLM2-135M's
    widths, 3 and 12 layers): rank 0's resident memory grows by this on sharding, glibc's in-use
    bytes by the shards alone (benchmarks/memory_plan.py has the run of 30 layers).
    """
    return weight_bytes(shape, elem) - root + root / tp


def optimizer_state_bytes(
    shape: ModelShape, elem: int, component: str, momentum: float | None = None
) -> float:
    """The optimizer's state for the trainable parameters.

    Args:
        shape: the model.
        elem: bytes of the parameters' dtype.
        component: the optimizer's `_component_` (an unknown one is counted as AdamW's 2 states).
        momentum: SGD's momentum (0 or None: SGD keeps no state).
    """
    if component == "torch.optim.SGD" and not momentum:
        return 0.0
    tensors, fixed = OPTIMIZER_STATES.get(component, (2, None))
    return shape.trainable * (tensors * elem + (fixed or 0.0))


def layer_activation_blocks(
    shape: ModelShape, rows: int, seq: int, elem: int, *, packed: bool = False
) -> list[tuple[float, int]]:
    """What one decoder layer's forward saves for backward, as (bytes of a tensor, tensors) pairs.

    Per token: the layer's input and normed input twice (attention, feed-forward: 4 D), queries and
    the attention output (2 q_dim), keys and values (2 kv_dim), the feed-forward's gate and up
    (2 F; 3 F when the down projection is frozen or adapted, which keeps its input, the product;
    LoRA's low-rank activations are not kept) and one fp32 log-sum-exp a head. Per position
    (shared by the rows): RoPE's fp32 tables, (3 head_dim + 2) x 4 bytes. On CPU, attention over
    at least 128 rows runs the kernel `ftune.modules.cpu_attention.CPU_KERNELS` names for the mask
    and length. Where that is SDPA on blocks of N query rows ("blocked N"), SDPA keeps an fp32 copy
    of each block's boolean mask: causal, half the (seq x seq) pairs (2 seq^2 bytes); packed rows
    (`packed`), the pairs within each document, counted for documents of one block at most: a
    longer document costs more, up to the causal figure. One SDPA call on a causal row ("sdpa") and
    the matrix-product blocks ("matmul N") keep no mask copy. The packed batch's boolean mask itself
    is shared by every layer (`packed_mask_bytes`).
    """
    d, tokens = shape, rows * seq
    head_dim = d.q_dim // max(d.num_heads, 1)
    blocks = [
        (tokens * d.embed_dim * elem, 4),
        (tokens * d.q_dim * elem, 2),
        (tokens * d.kv_dim * elem, 2),
        (tokens * d.ffn_dim * elem, 2 if d.lean_down else 3),
        (tokens * 4 * d.num_heads, 1),
        (seq * (3 * head_dim + 2) * 4, 1),
    ]
    kernel = (
        cpu_kernel("masked, one row" if rows == 1 else "masked", seq) if packed else cpu_kernel("causal", seq)
    )
    if seq >= CPU_ATTENTION_FROM and kernel.startswith("blocked "):
        n = int(kernel.split()[1])  # query rows a block
        if packed:
            width = min(seq, n)
            blocks.append((4 * rows * width * width, -(-seq // width)))
        else:  # a block's keys run to its last row: seq / 2 on average
            blocks.append((4 * n * seq / 2, -(-seq // n)))
    return blocks


def layer_activation_bytes(
    shape: ModelShape, rows: int, seq: int, elem: int, *, trains_layers: bool = True, packed: bool = False
) -> float:
    """What one decoder layer's forward saves for backward (`layer_activation_blocks`, summed)."""
    if not trains_layers:
        return 0.0
    return float(sum(size * n for size, n in layer_activation_blocks(shape, rows, seq, elem, packed=packed)))


def checkpointed_activation_bytes(
    shape: ModelShape, rows: int, seq: int, elem: int, *, packed: bool = False
) -> float:
    """Activation checkpointing: each layer keeps its input; backward recomputes one layer at a time."""
    kept = shape.num_layers * rows * seq * shape.embed_dim * elem
    return kept + layer_activation_bytes(shape, rows, seq, elem, packed=packed)


def packed_mask_bytes(rows: int, queries: int, keys: int) -> float:
    """The document mask of a packed batch (`ftune.training.packed_mask`): one bool (queries x keys)
    a row, built once a micro-batch and read by every layer, alive until its backward ends."""
    return rows * queries * keys


def loss_blocks(
    shape: ModelShape, tokens: int, num_chunks: int, *, trains_output: bool, copies: int = 3
) -> list[tuple[float, int]]:
    """The chunked loss (`ftune.training.ChunkedCrossEntropyLoss` and the DPO/KD/GRPO losses), as
    (bytes of a tensor, tensors) pairs.

    One block of fp32 logits at a time (`copies` of it alive: the logits, their softmax turned into
    the gradient in place, the block's one-hot and products), the gradient of the hidden states it
    keeps for backward (fp32, tokens x D) and, when the output projection trains, its fp32 gradient.
    """
    block = -(-tokens // max(num_chunks, 1))
    blocks = [(block * shape.vocab_size * 4, copies), (tokens * shape.embed_dim * 4, 1)]
    if trains_output:
        blocks.append((shape.vocab_size * shape.embed_dim * 4, 1))
    return blocks


def loss_bytes(
    shape: ModelShape, tokens: int, num_chunks: int, *, trains_output: bool, copies: int = 3
) -> float:
    """The chunked loss's memory (`loss_blocks`, summed)."""
    blocks = loss_blocks(shape, tokens, num_chunks, trains_output=trains_output, copies=copies)
    return float(sum(size * n for size, n in blocks))


def kv_cache_bytes(shape: ModelShape, rows: int, length: int, elem: int) -> float:
    """A KV cache for sampling: layers x 2 (keys, values) x rows x length x kv_dim."""
    return shape.num_layers * 2 * rows * length * shape.kv_dim * elem


def hidden_bytes(shape: ModelShape, tokens: int, elem: int) -> float:
    """One (tokens x D) tensor of hidden states, e.g. a teacher's or a reference's output."""
    return tokens * shape.embed_dim * elem


def inference_layer_bytes(shape: ModelShape, rows: int, seq: int, elem: int) -> float:
    """The largest transient of a forward without autograd: one layer's widest tensors at once."""
    return rows * seq * (2 * shape.embed_dim + shape.q_dim + 2 * shape.kv_dim + 3 * shape.ffn_dim) * elem
