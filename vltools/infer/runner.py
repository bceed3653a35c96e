"""The one inference runner: ids -> model step -> checkpoint, resumable and shardable; it knows no file format.

Every stage that computes one result per input item (extract-regions, segment-pool, concept-scores, encode,
caption, caption --pairs, match over features) runs `run`: the items of this shard that its checkpoint
(vltools.io.checkpoint) does not already hold are read in batches, passed through the model step (the stage's
`produce`), and kept by the checkpoint as they come, so that a killed run continues with `--resume`; the stage then
reads them back in input order (`Checkpoint.gather`) into its output's writer. Under torchrun the processes share
the batches and the first one, the only one with a checkpoint, keeps what one process would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from vltools.devices import nonfinite_advice
from vltools.distributed import from_main, gather, gathered, place, share
from vltools.errors import VLToolsError, argument, keep_note
from vltools.infer.settings import COMMIT_SECONDS, parse_shard
from vltools.io.checkpoint import Checkpoint, Codec, Rows
from vltools.io.hdf5 import first_nonfinite
from vltools.io.output import is_device, is_stdout, output_name
from vltools.io.progress import log, progress
from vltools.io.scratch import scratch_folder

MAX_FAILED_SHOWN = 20      # skipped items named one by one on stderr (the output's /failed lists them all)
Results = Mapping[str, np.ndarray] | Sequence[dict]
Produce = Callable[[list[str]], Iterable[tuple[list[str], Results]]]


def shard_ids(ids: Sequence[str], shard: str | None) -> list[str]:
    """The ids of shard `I/N` (every N-th from I), or all of them."""
    if shard is None:
        return list(ids)
    index, count = parse_shard(shard)
    return list(ids[index::count])


def resumable(out: str | None) -> bool:
    """Whether output `out` is a file, whose run can be resumed (not standard output, a device, or memory)."""
    return not is_stdout(out) and not is_device(out)


def check_output(out: str | None, resume: bool) -> None:
    """Refuse `--resume` without `-o` (call before building models, so the mistake is reported at once)."""
    if resume and not resumable(out):
        raise VLToolsError("--resume needs -o PATH of a file: progress of a run to standard output or a device "
                           "cannot be kept")


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
               resume: bool, commit_seconds: float = COMMIT_SECONDS) -> Iterator[Checkpoint | None]:
    """The checkpoint of a run writing `out`: `OUT.partial/` for a file (covered by the lock of OUT, which the
    stage holds), a scratch folder otherwise; None on the other processes of a torchrun job, whose results the
    first keeps."""
    if not place().main:
        yield None
        return
    with contextlib.ExitStack() as stack:
        folder = Path(f"{out}.partial") if resumable(out) else stack.enter_context(scratch_folder()) / "partial"
        yield Checkpoint(folder, output_name(out), codec, options, digests, resume, commit_seconds, resumable(out))


def run(stage: str, ids: Sequence[str], kept: Checkpoint | None, produce: Produce, unit: str = "items",
        batch_size: int = 1) -> int:
    """Pass every id of `ids` the checkpoint `kept` does not hold through `produce` (which batches them) into it;
    on any failure the checkpoint keeps what is whole and drops the rest. Returns how many ids were computed now.

    Under torchrun every process runs this, and only the first holds a checkpoint (the others pass None): each
    process produces whole batches of `batch_size` of the ids left in turn (batch k on process k mod N, so that
    every batch is the one a single process makes, and so are its results), and the first keeps them all."""
    done = from_main(kept.done if kept is not None else None)
    todo = [i for i in ids if i not in done]
    if kept is not None and kept.resume:
        if len(todo) < len(ids):
            log.info(f"{stage}: resuming {kept.output}: {len(ids) - len(todo)} of {len(ids)} {unit} kept from an "
                     "interrupted run")
        else:
            log.info(f"{stage}: nothing to resume for {kept.output}; starting from the beginning")
    computed = 0
    try:
        for batches in progress(gathered(produce([todo[k] for k in share(len(todo), batch_size)])),
                                total=len(todo), desc=stage, unit=unit,  # counted in the user's unit
                                size=lambda batches: sum(len(batch[0]) for batch in batches)):
            for done_ids, results in batches:
                kept.add(done_ids, results)
                computed += len(done_ids)
    except BaseException as exc:
        if kept is not None:
            kept.discard()
            if kept.resumable:
                held = len(kept.done)
                keep_note(exc, f"{held} of {len(ids)} {unit} kept in {kept.folder}/" if held else "nothing was kept",
                          resumable=held > 0)
        raise
    return computed


def gathered_failures(failed: list[str], ids: Sequence[str]) -> list[str]:
    """The failure lines ("id\treason") of every process of a torchrun job on the first ([] on the others), in the
    order of `ids`, as one process lists them."""
    found = gather(failed)
    if found is None:
        return []
    position = {item: number for number, item in enumerate(ids)}
    return sorted((line for lines in found for line in lines), key=lambda line: position[line.split("\t", 1)[0]])


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
                  resume: bool, codec: Rows,
                  commit_seconds: float = COMMIT_SECONDS) -> Iterator[Iterator[np.ndarray] | None]:
    """One float row per id of `ids` (an embedding, a caption's similarities) through `run` and the checkpoint of
    `out`; `compute(positions)` yields the [B, ...] rows of the items at those positions of `ids`, in blocks of
    `batch_size`. Then yield every row of `ids` in order, in blocks, for the caller to write, and remove the
    checkpoint once the caller is done (a failed write keeps it for --resume). None on the other processes of a
    torchrun job, whose rows the first keeps. Where nothing could be resumed (standard output, a device, memory)
    in one process, the rows come straight from `compute`: its caller holds them anyway, and a checkpoint in a
    scratch folder would only be one more place to run out of room."""
    if not place().active and not resumable(out):
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
        if kept is None:
            yield None
            return
        yield (arrays["rows"] for _, arrays in kept.gather(ids, batch_size))
        kept.remove()
