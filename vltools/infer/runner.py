"""The one inference runner: ids -> model step -> checkpoint, resumable and shardable; it knows no file format.

Every stage that computes one result per input item (extract-regions, segment-pool, concept-scores, encode,
caption, caption --pairs, match over features) runs `run`: the items of this part (`part_ids`) that its checkpoint
(vltools.io.checkpoint) does not already hold are read in batches, passed through the model step (the stage's
`produce`), and kept by the checkpoint as they come, so that a killed run continues with `--resume`; the stage then
reads them back in input order (`Checkpoint.gather`) into its output's writer. Under torchrun each process runs
its own part of the inputs into its own output (vltools.io.shards): nothing passes through one process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from vltools.devices import nonfinite_advice
from vltools.errors import VLToolsError, argument, keep_note
from vltools.infer.settings import COMMIT_SECONDS
from vltools.io.checkpoint import Checkpoint, Codec, Rows
from vltools.io.hdf5 import first_nonfinite
from vltools.io.output import is_device, is_stdout, output_name
from vltools.io.progress import log, progress
from vltools.io.scratch import scratch_folder
from vltools.io.shards import Part

MAX_FAILED_SHOWN = 20      # skipped items named one by one on stderr (the output's /failed lists them all)
T = TypeVar("T")
Results = Mapping[str, np.ndarray] | Sequence[dict]
Produce = Callable[[list[str]], Iterable[tuple[list[str], Results]]]


def part_ids(ids: Sequence[T], part: Part | None, batch_size: int = 1) -> list[T]:
    """The ids of `part` (a contiguous run of whole batches of `batch_size`, vltools.io.shards), or all of them."""
    if part is None:
        return list(ids)
    start, stop = part.span(len(ids), batch_size)
    return list(ids[start:stop])


def resumable(out: str | None) -> bool:
    """Whether output `out` is a file, whose run can be resumed (not standard output, a device, or memory)."""
    return not is_stdout(out) and not is_device(out)


def check_output(out: str | None, resume: bool) -> None:
    """Refuse `--resume` without `-o` (call before building models, so the mistake is reported at once)."""
    if resume and not resumable(out):
        raise VLToolsError("--resume needs -o PATH of a file: progress of a run to standard output or a device "
                           "cannot be kept")


def finished_part(out: str | None, part: Part | None, resume: bool) -> bool:
    """Whether `--resume` finds this process's part of a set already written by the interrupted run (its file there,
    no checkpoint beside it): it is kept as it is, and the run says so, so that a job whose one process was killed
    continues that process's part alone."""
    if not resume or part is None or not part.in_folder or out is None or not Path(out).is_file() \
            or Path(f"{out}.partial").exists():
        return False
    log.info(f"{out}: finished by the interrupted run; kept")
    return True


def refuse_nonfinite_results(rows: np.ndarray, ids: Sequence[str], what: str, id_kind: str, precision: str) -> None:
    """Refuse model outputs `rows` (one per id of `ids`: `what`, e.g. "similarities") holding NaN or an infinity,
    in one line naming the first such row's `id_kind` id, the precision they were computed in and what to do
    instead (`vltools.devices.nonfinite_advice`), as they are computed: the same from the Python API, whose results
    stay in memory, as from a command writing a file."""
    bad = first_nonfinite(rows)
    if bad is not None:
        raise VLToolsError(f"{id_kind} {ids[bad]!r}: the model gave NaN or infinite {what} under "
                           f"{argument('precision', precision)}; {nonfinite_advice(precision)}")


def finite_results(blocks: Iterable[np.ndarray], ids: Sequence[str], what: str, id_kind: str,
                   precision: str) -> Iterator[np.ndarray]:
    """`blocks` (rows of `ids`, in order) as they come, each checked by `refuse_nonfinite_results`. A refusal closes
    `blocks` (a generator) at once: one suspended inside a precision's autocast would otherwise leave autocast on in
    this thread for as long as the traceback holds it (an API caller's next call would run in fp16)."""
    start = 0
    try:
        for block in blocks:
            refuse_nonfinite_results(block, ids[start:start + len(block)], what, id_kind, precision)
            start += len(block)
            yield block
    finally:
        getattr(blocks, "close", lambda: None)()


@contextlib.contextmanager
def checkpoint(out: str | None, codec: Codec, options: Mapping[str, object], digests: Mapping[str, str] | str,
               resume: bool, commit_seconds: float = COMMIT_SECONDS) -> Iterator[Checkpoint]:
    """The checkpoint of a run writing `out`: `OUT.partial/` for a file (covered by the lock of OUT, which the
    stage holds), a scratch folder otherwise."""
    with contextlib.ExitStack() as stack:
        folder = Path(f"{out}.partial") if resumable(out) else stack.enter_context(scratch_folder()) / "partial"
        yield Checkpoint(folder, output_name(out), codec, options, digests, resume, commit_seconds, resumable(out))


def run(stage: str, ids: Sequence[str], kept: Checkpoint, produce: Produce, unit: str = "items",
        batch_size: int = 1) -> int:
    """Pass every id of `ids` the checkpoint `kept` does not hold through `produce` (which batches them) into it;
    on any failure the checkpoint keeps what is whole and drops the rest. Returns how many ids were computed now."""
    todo = [i for i in ids if i not in kept.done]
    if kept.resume:
        if len(todo) < len(ids):
            log.info(f"{stage}: resuming {kept.output}: {len(ids) - len(todo)} of {len(ids)} {unit} kept from an "
                     "interrupted run")
        else:
            log.info(f"{stage}: nothing to resume for {kept.output}; starting from the beginning")
    computed = 0
    try:
        for done_ids, results in progress(produce(todo), total=len(todo), desc=stage, unit=unit,  # the user's unit
                                          size=lambda batch: len(batch[0])):
            kept.add(done_ids, results)
            computed += len(done_ids)
    except BaseException as exc:
        kept.discard()
        if kept.resumable:
            held = len(kept.done)
            keep_note(exc, f"{held} of {len(ids)} {unit} kept in {kept.folder}/" if held else "nothing was kept",
                      resumable=held > 0)
        raise
    return computed


def report_skipped(stage: str, out: str | None, count: int, failed: list[str]) -> None:
    """Counts on stderr, and each skipped image (the first few) with its reason."""
    log.info(f"{stage}: wrote {count} images to {output_name(out)}; skipped {len(failed)} bad images")
    for line in failed[:MAX_FAILED_SHOWN]:
        image_id, reason = line.split("\t", 1)
        log.warning(f"{stage}: skipped {image_id}: {reason}")
    if len(failed) > MAX_FAILED_SHOWN:
        log.warning(f"{stage}: ... and {len(failed) - MAX_FAILED_SHOWN} more, listed in the output's /failed")


@contextlib.contextmanager
def computed_rows(stage: str, out: str | None, ids: Sequence[str], compute: Callable[[list[int]], Iterator[np.ndarray]],
                  unit: str, batch_size: int, options: Mapping[str, object], digests: Mapping[str, str] | str,
                  resume: bool, codec: Rows, commit_seconds: float = COMMIT_SECONDS) -> Iterator[Iterator[np.ndarray]]:
    """One float row per id of `ids` (an embedding, a caption's similarities) through `run` and the checkpoint of
    `out`; `compute(positions)` yields the [B, ...] rows of the items at those positions of `ids`, in blocks of
    `batch_size`. Then yield every row of `ids` in order, in blocks, for the caller to write, and remove the
    checkpoint once the caller is done (a failed write keeps it for --resume). Where nothing could be resumed
    (standard output, a device, memory), the rows come straight from `compute`: its caller holds them anyway, and a
    checkpoint in a scratch folder would only be one more place to run out of room."""
    if not resumable(out):
        yield progress(compute(list(range(len(ids)))), total=len(ids), desc=stage, unit=unit, size=len)
        return
    position = {item: number for number, item in enumerate(ids)}

    def produce(todo: list[str]) -> Iterator[tuple[list[str], dict[str, np.ndarray]]]:
        start = 0
        for block in compute([position[i] for i in todo]):
            yield todo[start:start + len(block)], {"rows": block}
            start += len(block)

    with checkpoint(out, codec, options, digests, resume, commit_seconds) as kept:
        run(stage, ids, kept, produce, unit, batch_size)
        yield (arrays["rows"] for _, arrays in kept.gather(ids, batch_size))
        kept.remove()
