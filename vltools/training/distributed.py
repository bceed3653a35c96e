"""Process-group set-up for training under torchrun: one process per GPU (NCCL) or CPU share (gloo); a
single process runs without a group. Only rank 0 validates and writes files.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from vltools.devices import resolve_device
from vltools.distributed import TIMEOUT, Place, place


@dataclass(frozen=True)
class Distributed(Place):
    """This process's place in a torchrun job (world_size 1 without torchrun) and the device it trains on."""

    device: torch.device = field(kw_only=True)

    def barrier(self) -> None:
        if self.active:
            dist.barrier()


@contextlib.contextmanager
def distributed(device: str) -> Iterator[Distributed]:
    """Join the torchrun process group when WORLD_SIZE > 1 (gloo on CPU, NCCL on CUDA) and leave it after."""
    where = place()
    if not where.active:
        yield Distributed(device=resolve_device(device))
        return
    chosen = resolve_device(device)
    if chosen.type == "cuda":
        chosen = torch.device("cuda", where.local_rank)
        torch.cuda.set_device(chosen)
    dist.init_process_group("nccl" if chosen.type == "cuda" else "gloo", timeout=TIMEOUT)
    try:
        yield Distributed(where.world_size, where.rank, where.local_rank, device=chosen)
    finally:
        dist.destroy_process_group()
