"""Optimizer-state memory of AdamW variants on SmolLM2-135M (full fine-tune: every weight trains).

    python benchmarks/optimizer_state_memory.py [--model smollm2_135m] [--eager]

For each optimizer: build the model (random weights: state size does not depend on their values),
take one step on a random gradient, and count the bytes of the optimizer's state with
`ftune.training.optimizer_state_bytes` (quantized states count their codes, scales and code maps).

torchao compiles its 8-bit/4-bit step per parameter shape (~35 s each on a 2-core CPU); --eager
replaces `torch.compile` with the identity (same state, slower steps).
"""

from __future__ import annotations

import argparse
import importlib

import torch

from ftune.runtime.torchao_logs import quiet_torchao_import_logs

OPTIMIZERS = {
    "torch.optim.AdamW (fp32 state)": "torch.optim.AdamW",
    "ftune.training.AdamWBf16State": "ftune.training.AdamWBf16State",
    "torchao.optim.AdamW8bit": "torchao.optim.AdamW8bit",
    "torchao.optim.AdamW4bit": "torchao.optim.AdamW4bit",
}


def _resolve(path: str):
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2_135m", help="a builder of ftune.models.smollm2")
    parser.add_argument("--eager", action="store_true", help="run torchao's step without torch.compile")
    args = parser.parse_args()
    if args.eager:
        torch.compile = lambda fn=None, **kwargs: fn
    quiet_torchao_import_logs()
    from ftune.models import smollm2
    from ftune.training import optimizer_state_bytes

    torch.manual_seed(0)
    model = getattr(smollm2, args.model)()
    params = [p for p in model.parameters() if p.requires_grad]
    n = sum(p.numel() for p in params)
    print(f"model: {args.model}, {n / 1e6:.1f}M trainable fp32 parameters ({n * 4 / 2**20:.0f} MiB)")
    print("| optimizer | state MiB | bytes / parameter | vs fp32 AdamW |")
    print("| --- | --- | --- | --- |")
    reference = None
    for label, path in OPTIMIZERS.items():
        optimizer = _resolve(path)(params, lr=1e-5)
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        optimizer.step()
        size = optimizer_state_bytes(optimizer)
        reference = reference or size
        print(f"| `{label}` | {size / 2**20:.1f} | {size / n:.3f} | {size / reference:.3f} |")
        del optimizer


if __name__ == "__main__":
    main()
