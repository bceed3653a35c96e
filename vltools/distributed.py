"""This process's place in a torchrun job, and what the processes of a run sharing one output exchange.

torchrun starts one process per GPU (or CPU share) with WORLD_SIZE, RANK and LOCAL_RANK in its environment; a
process started without it is a whole job of one. Training joins its own process group (vltools.training.distributed).
Most inference stages exchange nothing: each process writes its own part (vltools.io.shards). The few runs whose
output is one matrix or one set of queries (`caption --logp`, rmac's queries for `search`) join a gloo group the
first time they exchange anything (CPU arrays, which gloo carries for CUDA and CPU runs alike) and leave it when
the process exits: each process takes whole blocks of the work in turn (`share`: block k goes to process k mod N),
so every block is the block one process would have made, and the first process gathers the rows (`gather_rows`)
and writes what one process would have written.

Importing this module does not load torch (the exchanges do, when called).
"""

from __future__ import annotations

import atexit
import datetime
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")
TIMEOUT = datetime.timedelta(hours=2)   # the longest wait for the others (one may validate, or merge a large output)


@dataclass(frozen=True)
class Place:
    """This process's place in a torchrun job (world_size 1 without torchrun)."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def place() -> Place:
    """Read from torchrun's environment: WORLD_SIZE, RANK and LOCAL_RANK."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return Place()
    return Place(world_size, int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0")))


def share(count: int, block: int = 1) -> list[int]:
    """The positions among `count` items that this process takes: the blocks of `block` items numbered rank,
    rank + world_size, ... (every position without torchrun)."""
    where = place()
    return [k for k in range(count) if (k // block) % where.world_size == where.rank]


def _join() -> None:
    """Join the job's process group once (gloo), unless one is joined already (a training's); leave it at exit."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    dist.init_process_group("gloo", timeout=TIMEOUT)
    atexit.register(dist.destroy_process_group)


def gather(value: T) -> list[T] | None:
    """Every process's `value` in rank order on the first process, None on the others; [value] without torchrun."""
    if not place().active:
        return [value]
    import torch.distributed as dist

    _join()
    found: list[T] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(value, found, dst=0)
    return found


def gather_rows(rows: np.ndarray, positions: Sequence[int]) -> np.ndarray | None:
    """On the first process, every process's rows at their places among all of them (`rows[i]` is the row of item
    `positions[i]`, as `share` gives the positions); None on the others; `rows` itself in a job of one."""
    found = gather((list(positions), rows))
    if found is None:
        return None
    if len(found) == 1:
        return rows
    import numpy as np

    out = None
    for places, part in found:
        if len(places):      # a process without items may hold an array of another shape
            if out is None:
                out = np.empty((sum(len(p) for p, _ in found), *part.shape[1:]), dtype=part.dtype)
            out[places] = part
    return rows if out is None else out
