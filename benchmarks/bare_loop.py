"""The bare PyTorch loop train_throughput.py compares the recipes with, run as its child process.

python benchmarks/bare_loop.py '<json spec>'   # what train_throughput.py runs; prints BARE_RESULT {...}
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from train_throughput import (
    BATCH_SIZE,
    LORA_ALPHA,
    LORA_RANK,
    LORA_TARGETS,
    LR,
    MODEL_NAME,
    SEQ_LEN,
    WEIGHT_DECAY,
    _peak_rss_gib,
)


def plain_model_modules() -> None:
    """Switch ftune's model modules to the plain PyTorch computation, for the bare loop.

    Attention becomes one ``F.scaled_dot_product_attention(is_causal=True)`` call per layer (no
    CPU block skipping), and RMSNorm and SwiGLU are left to autograd (which saves more for
    backward).
    """
    from ftune.modules import RMSNorm, SwiGLU, attention

    attention.CPU_ATTENTION_FROM = 1 << 30  # never reached: SDPA over the whole sequence
    RMSNorm.lean_backward = SwiGLU.lean_backward = False


def bare_child(spec: dict) -> None:
    """The bare PyTorch loop: model(tokens) -> full logits -> F.cross_entropy -> AdamW."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from ftune.checkpointing import load_hf
    from ftune.data import build_dataloader
    from ftune.data.collate import padded_collate_sft
    from ftune.datasets import demo_dataset
    from ftune.models.smollm2 import smollm2_tokenizer

    class NaiveLoRA(nn.Module):
        def __init__(self, base: nn.Linear) -> None:
            super().__init__()
            self.base, self.scale = base.requires_grad_(False), LORA_ALPHA / LORA_RANK
            kw = {"dtype": base.weight.dtype, "bias": False}
            self.a = nn.Linear(base.in_features, LORA_RANK, **kw)
            self.b = nn.Linear(LORA_RANK, base.out_features, **kw)
            nn.init.zeros_(self.b.weight)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base(x) + self.scale * self.b(self.a(x))

    # The textbook computation: none of ftune's CPU-attention or activation-memory work in the model.
    plain_model_modules()
    torch.manual_seed(0)
    home = Path(spec["ftune_home"])
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[spec["dtype"]]
    model = load_hf(home / "models" / MODEL_NAME, dtype=dtype).train()
    if spec["method"] == "lora":
        model.requires_grad_(False)
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if name in LORA_TARGETS and isinstance(child, nn.Linear):
                    setattr(module, name, NaiveLoRA(child))
    if spec["compile"]:
        for layer in model.layers:
            layer.compile()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=LR[spec["method"]], weight_decay=WEIGHT_DECAY)

    # The recipe's data: the demo dataset packed into 512-token rows, batch 4, shuffled with seed 0.
    tokenizer = smollm2_tokenizer(str(home / "models" / MODEL_NAME), max_seq_len=SEQ_LEN)
    dataset = demo_dataset(tokenizer, data_dir=str(home / "data" / "demo"), packed=True)
    loader = build_dataloader(
        dataset, batch_size=BATCH_SIZE, collate_fn=lambda b: padded_collate_sft(b, pad_id=tokenizer.pad_id)
    )
    batches = [b for _, b in zip(range(spec["steps"]), loader)]

    durations = []
    for batch in batches:
        start = time.perf_counter()
        tokens, labels = batch["tokens"], batch["labels"]
        logits = model(tokens)  # (b, s, vocab): causal attention, no document mask
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        float(loss)
        durations.append(time.perf_counter() - start)
    print("BARE_RESULT " + json.dumps({"step_seconds": durations, "peak_rss_gib": _peak_rss_gib()}))


# ----------------------------------------------------------------------------- report


if __name__ == "__main__":
    bare_child(json.loads(sys.argv[1]))
