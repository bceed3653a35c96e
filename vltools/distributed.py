"""This process's place in a torchrun job, and what the processes of an inference stage exchange.

torchrun starts one process per GPU (or CPU share) with WORLD_SIZE, RANK and LOCAL_RANK in its environment; a
process started without it is a whole job of one. Training joins its own process group (vltools.training.distributed);
an inference stage joins a gloo group the first time its processes exchange anything (they exchange CPU arrays
and records, which gloo carries for CUDA and CPU runs alike) and leaves it when the process exits.

Each process takes whole blocks of the work in turn (`share`: block k goes to process k mod N), so every block is
the block one process would have made, and the first process gathers the results (`gathered` as they come,
`gather_rows` at the end) and writes what one process would have written.

Importing this module does not load torch (the exchanges do, when called).
"""

from __future__ import annotations

import atexit
import datetime
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from vltools.errors import VLToolsError

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


def from_main(value: T) -> T:
    """The first process's `value`, on every process (what the others pass is ignored)."""
    if not place().active:
        return value
    import torch.distributed as dist

    _join()
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


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


def gathered(batches: Iterable[T]) -> Iterator[list[T]]:
    """Step by step, the next batch of every process, in rank order, on the first process (which yields them;
    the others send theirs and yield nothing), until every process has sent all of its batches. A failure in
    one process's batches stops every process: that one raises its exception, the others a one-line error
    with its message (a VLToolsError's own message, so the first process reports what one process would)."""
    if not place().active:
        for batch in batches:
            yield [batch]
        return
    source, finished, failure = iter(batches), False, None
    while True:
        if finished:
            mine: tuple[str, object] = ("end", None)
        else:
            try:
                mine = ("batch", next(source))
            except StopIteration:
                finished, mine = True, ("end", None)
            except BaseException as exc:     # told to the others, then raised here (Ctrl-C too)
                failure, mine = exc, ("failed", _describe(exc))
        sent = gather(mine)
        verdict = from_main(_verdict(sent) if sent is not None else None)
        if verdict[0] == "failed":
            if failure is not None:
                raise failure
            raise VLToolsError(verdict[1])
        if sent is not None:
            yield [batch for kind, batch in sent if kind == "batch"]
        if verdict[0] == "end":
            return


def _describe(exc: BaseException) -> str:
    """What the other processes report for a failure in this one."""
    if isinstance(exc, VLToolsError):
        return str(exc)
    return f"process {place().rank} of the torchrun job failed: {type(exc).__name__}: {exc}"


def _verdict(sent: Sequence[tuple[str, object]]) -> tuple[str, object]:
    """On the first process: ("failed", message) of the first failed process, else ("end", None) once every
    process is done, else ("go", None)."""
    for kind, what in sent:
        if kind == "failed":
            return kind, what
    return ("end", None) if all(kind == "end" for kind, _ in sent) else ("go", None)
