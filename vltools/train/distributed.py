"""Process-group set-up for training under torchrun: one process per GPU (NCCL) or CPU share (gloo); a
single process runs without a group. Only rank 0 validates and writes files.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from vltools.devices import resolve_device


@dataclass(frozen=True)
class Distributed:
    """This process's place in a torchrun job (world_size 1 without torchrun)."""

    world_size: int
    rank: int
    device: torch.device

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.active:
            dist.barrier()


@contextlib.contextmanager
def distributed(device: str) -> Iterator[Distributed]:
    """Join the torchrun process group when WORLD_SIZE > 1 (gloo on CPU, NCCL on CUDA) and leave it after."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        yield Distributed(1, 0, resolve_device(device))
        return
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    chosen = resolve_device(device)
    if chosen.type == "cuda":
        chosen = torch.device("cuda", local_rank)
        torch.cuda.set_device(chosen)
    dist.init_process_group("nccl" if chosen.type == "cuda" else "gloo", timeout=datetime.timedelta(hours=2))
    try:
        yield Distributed(world_size, rank, chosen)
    finally:
        dist.destroy_process_group()
