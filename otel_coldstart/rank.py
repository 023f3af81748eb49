"""The root's rank: which process of a distributed job this start-up is."""

from __future__ import annotations

import os
import sys
from typing import Any

from . import semconv

# Launchers' variables, most specific first: torchrun/torch.distributed, Open MPI, MPICH/
# Intel MPI, Slurm.
_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
_WORLD_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
_LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")


def _first_int(names) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def rank_attributes() -> dict[str, Any]:
    """Rank, world size and local rank of this process: from torch.distributed once its
    process group is up (the truth, and the only source where a framework such as vLLM passes
    ranks as arguments, not variables), else from the launcher's environment variables.

    Read at instrument() and again when the start-up ends, because the process group is
    usually created after instrument(). torch is never imported here.
    """
    attrs: dict[str, Any] = {}
    rank, world_size = _first_int(_RANK_VARS), _first_int(_WORLD_SIZE_VARS)
    local_rank = _first_int(_LOCAL_RANK_VARS)
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            rank, world_size = distributed.get_rank(), distributed.get_world_size()
    except Exception:  # a half-torn-down process group: keep what the environment says
        pass
    if rank is not None:
        attrs[semconv.RANK] = rank
    if world_size is not None:
        attrs[semconv.WORLD_SIZE] = world_size
    if local_rank is not None:
        attrs[semconv.LOCAL_RANK] = local_rank
    return attrs
