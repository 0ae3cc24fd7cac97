"""What a process runs on, shared by training and inference: device and dtype, the process group,
this process's rank, and seeding.

    device, dtype = runtime.get_device("auto"), runtime.get_dtype("bf16")
    runtime.seed_everything(0)
    info = runtime.init_distributed(device)          # world size 1 without torchrun
"""

from ftune.runtime.device import default_dtype, get_device, get_dtype
from ftune.runtime.distributed import DistInfo, default_backend, destroy_distributed, init_distributed
from ftune.runtime.hardware import announce
from ftune.runtime.rank import get_rank, is_rank_zero, world_size
from ftune.runtime.seed import get_rng_state, seed_everything, set_rng_state
from ftune.settings import DistCheckSettings

__all__ = [
    "announce",
    "DistCheckSettings",
    "DistInfo",
    "default_backend",
    "default_dtype",
    "destroy_distributed",
    "get_device",
    "get_dtype",
    "get_rank",
    "get_rng_state",
    "init_distributed",
    "is_rank_zero",
    "seed_everything",
    "set_rng_state",
    "world_size",
]
