"""Runs under torchrun (world size 2, gloo): one FSDP2 step of each optimizer named on the command line
(JSON nodes), on a tiny sharded model. Rank 0 writes {node: "ok" | error} as JSON to the given file.

    torchrun --nproc_per_node 2 sharded_optimizer_driver.py <out.json> <node-json>...
"""

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from ftune.config import instantiate


def main() -> None:
    out, *nodes = sys.argv[1:]
    dist.init_process_group("gloo")
    results = {}
    for text in nodes:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
        fully_shard(model)
        try:
            optimizer = instantiate(json.loads(text), list(model.parameters()))
            for _ in range(2):
                model(torch.randn(4, 8)).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
            results[text] = "ok"
        except Exception as e:  # noqa: BLE001 - the verdict the test compares
            results[text] = f"{type(e).__name__}: {e}"
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(results, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
