"""The device mesh of a distributed run: data parallel (FSDP2) x tensor parallel x context parallel.

A run of `world_size` processes is a grid ``dp x tp`` or ``dp x cp`` (dimension names ``"dp"``,
``"tp"``, ``"cp"``), ranks laid out row-major as torch's ``init_device_mesh`` lays them: the ``tp``
(or ``cp``) ranks of one data-parallel row are neighbours (0 and 1 at tp=2), where on a GPU node
the fast links are. Ranks of one row read the same batch (`data_rank`); FSDP2 shards over ``dp``
(and over ``cp`` too: context-parallel ranks hold whole layers and sum their gradients, as
torchtitan's ``dp_shard_cp``).

Tensor and context parallel together (``tp x cp``) are not offered: each alone is exact here, and
the two exchanges would have to agree on how heads and sequence split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from ftune.runtime.distributed import DistInfo
from ftune.settings.dist import mesh_problems


@dataclass(frozen=True)
class ParallelMesh:
    """Where this rank sits in the run's grid, and the sub-meshes each parallelism uses.

    Attributes:
        mesh: the 2-D mesh (``("dp", "tp")`` or ``("dp", "cp")``), or None for data parallel alone.
        tp: tensor-parallel ranks (1: none).
        cp: context-parallel ranks (1: none).
        data_rank: this rank's data-parallel row: the shard of the dataset it reads.
        data_ranks: the number of rows (dp): how many shards the dataset is split into.
    """

    mesh: DeviceMesh | None
    tp: int
    cp: int
    data_rank: int
    data_ranks: int

    @property
    def tp_mesh(self) -> DeviceMesh | None:
        """The 1-D mesh of this rank's tensor-parallel group, or None."""
        return self.mesh["tp"] if self.tp > 1 else None

    @property
    def cp_group(self) -> torch.distributed.ProcessGroup | None:
        """The process group of this rank's context-parallel ranks (one sequence's shards), or None."""
        return self.mesh["cp"].get_group() if self.cp > 1 else None

    @property
    def cp_rank(self) -> int:
        """This rank's place in its context-parallel group (0 without context parallel)."""
        return self.mesh["cp"].get_local_rank() if self.cp > 1 else 0

    @property
    def fsdp_mesh(self) -> DeviceMesh | None:
        """The mesh FSDP2 shards over: ``dp`` beside tensor parallel, ``dp`` and ``cp`` flattened
        beside context parallel, None (the default: every rank) for data parallel alone."""
        if self.tp > 1:
            return self.mesh["dp"]
        if self.cp > 1:
            return self.mesh["dp", "cp"]._flatten("dp_cp")
        return None


def device_mesh(
    device: torch.device, info: DistInfo, tensor_parallel_dim: int = 1, context_parallel_dim: int = 1
) -> ParallelMesh:
    """The run's mesh: ``dp x tp`` or ``dp x cp``, with dp = world_size / (tp x cp).

    Args:
        device: this rank's device (its type names the mesh's device type).
        info: this rank's place in the process group (`init_distributed`).
        tensor_parallel_dim: ranks that split each layer's projections (1: none).
        context_parallel_dim: ranks that split each sequence (1: none).

    Raises:
        ValueError: a grid that does not fit the world size, or both tensor and context parallel.
    """
    world_size = info.world_size
    if problems := mesh_problems(
        world_size, tensor_parallel_dim=tensor_parallel_dim, context_parallel_dim=context_parallel_dim
    ):
        raise ValueError(problems[0])
    inner = tensor_parallel_dim * context_parallel_dim
    if inner == 1:
        return ParallelMesh(None, 1, 1, info.rank, world_size)
    name = "tp" if tensor_parallel_dim > 1 else "cp"
    dp = world_size // inner
    mesh = init_device_mesh(device.type, (dp, inner), mesh_dim_names=("dp", name))
    return ParallelMesh(mesh, tensor_parallel_dim, context_parallel_dim, mesh["dp"].get_local_rank(), dp)
