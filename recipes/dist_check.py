"""Check a distributed launch.   ftune run --nproc_per_node 2 dist_check

Starts the process group (gloo on CPU, nccl on CUDA), all-reduces each rank's id and checks the
sum, then prints one line per rank. Use it to test a machine or a multi-node rendezvous before
a long run.
"""

import os
import time

import torch
import torch.distributed as dist

from ftune import config
from ftune.runtime import DistCheckSettings, default_backend, init_distributed


class RankFailed(RuntimeError):
    """The failure fail_rank asks for: reported as one line, like any user error."""

    user_facing = True


# The settings this recipe reads; `ftune run/validate/--help` read them from here.
SETTINGS = DistCheckSettings


def main(cfg: config.Config) -> None:
    s = cfg.settings(SETTINGS)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    backend = s.backend or default_backend(device)
    info = init_distributed(device, backend, timeout_s=s.dist_timeout_s)
    rank, world = info.rank, info.world_size
    if s.fail_rank == rank:
        raise RankFailed(f"rank {rank} fails on purpose (fail_rank={s.fail_rank}).")
    if s.hang_rank == rank:  # the other ranks wait in the all-reduce below until dist_timeout_s
        time.sleep(10 * s.dist_timeout_s)
    if device.type == "cuda":
        device = torch.device("cuda", info.local_rank)
        torch.cuda.set_device(device)
    # All-reduce where training will: on the GPU when the backend has NCCL, so NCCL is what is checked.
    on = device if "nccl" in backend else torch.device("cpu")
    total = torch.tensor([rank], dtype=torch.int64, device=on)
    dist.all_reduce(total)
    expected = world * (world - 1) // 2
    if total.item() != expected:
        raise RuntimeError(
            f"all_reduce gave {total.item()}, expected {expected}: the process group is broken."
        )
    print(
        f"rank {rank}/{world} ok: backend={backend} device={on} host={os.uname().nodename} "
        f"all_reduce={total.item()}",
        flush=True,
    )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    config.run(main)
