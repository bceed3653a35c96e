"""The one inference runner: reader -> model step -> writer, resumable and shardable.

Every stage that writes one result per input item (extract-regions, segment-pool, concept-scores: features
HDF5; caption and caption --pairs: JSONL records) runs `run`: the items of this shard that the writer does not
already hold are read in batches, passed through the model step, and handed to the writer, which makes them
durable as they come (`OUT.partial/` parts or `OUT.partial` records) so that a killed run continues with
`--resume`; `finish` writes OUT atomically in input order. A stage supplies only its `produce` function
(reading and the model step) and one of the two writers. Under torchrun the processes share the batches and the
first one, the only one with a writer, writes what one process would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from vltools.distributed import from_main, gather, gathered, place, share
from vltools.errors import VLToolsError
from vltools.infer.settings import COMMIT_SECONDS, parse_shard
from vltools.io.output import is_device, is_stdout, output_name, written
from vltools.io.partial import PartialRecords
from vltools.io.parts import PartsWriter
from vltools.io.progress import log, progress
from vltools.io.records import write_records
from vltools.io.scratch import scratch_folder

Results = Mapping[str, np.ndarray] | Sequence[dict]
Produce = Callable[[list[str]], Iterable[tuple[list[str], Results]]]


class Writer(Protocol):
    """Where finished results go: `done` holds the ids already durable (from an interrupted run, when `resume`);
    `output` is what the user calls the output (the -o path, or "standard output")."""

    done: Collection[str]
    resume: bool
    output: str

    def add(self, ids: list[str], results: Results) -> None: ...

    def discard(self) -> None: ...


def shard_ids(ids: Sequence[str], shard: str | None) -> list[str]:
    """The ids of shard `I/N` (every N-th from I), or all of them."""
    if shard is None:
        return list(ids)
    index, count = parse_shard(shard)
    return list(ids[index::count])


def check_output(out: str | None, resume: bool) -> None:
    """Refuse `--resume` without `-o` (call before building models, so the mistake is reported at once)."""
    if resume and (is_stdout(out) or is_device(out)):
        raise VLToolsError("--resume needs -o PATH of a file: progress of a run to standard output or a device "
                           "cannot be kept")


def run(stage: str, ids: Sequence[str], writer: Writer | None, produce: Produce, unit: str = "items",
        batch_size: int = 1) -> int:
    """Pass every id of `ids` the writer does not hold through `produce` (which batches them) into the writer;
    on any failure the writer drops what cannot be resumed. Returns how many ids were written now.

    Under torchrun every process runs this, and only the first holds a writer (the others pass None): each
    process produces whole batches of `batch_size` of the ids left in turn (batch k on process k mod N, so that
    every batch is the one a single process makes, and so are its results), and the first writes them all."""
    done = from_main(set(writer.done) if writer is not None else None)
    todo = [i for i in ids if i not in done]
    if writer is not None and writer.resume:
        if len(todo) < len(ids):
            log.info(f"{stage}: resuming {writer.output}: {len(ids) - len(todo)} of {len(ids)} {unit} kept from an "
                     "interrupted run")
        else:
            log.info(f"{stage}: nothing to resume for {writer.output}; starting from the beginning")
    written = 0
    try:
        for batches in progress(gathered(produce([todo[k] for k in share(len(todo), batch_size)])),
                                total=len(todo), desc=stage, unit=unit,  # counted in the user's unit
                                size=lambda batches: sum(len(batch[0]) for batch in batches)):
            for done_ids, results in batches:
                writer.add(done_ids, results)
                written += len(done_ids)
    except BaseException:
        if writer is not None:
            writer.discard()
        raise
    return written


def gathered_failures(failed: list[str], ids: Sequence[str]) -> list[str]:
    """The failure lines ("id\treason") of every process of a torchrun job on the first ([] on the others), in the
    order of `ids`, as one process lists them."""
    found = gather(failed)
    if found is None:
        return []
    position = {item: number for number, item in enumerate(ids)}
    return sorted((line for lines in found for line in lines), key=lambda line: position[line.split("\t", 1)[0]])


class RecordsWriter:
    """JSONL records keyed by `key`: into `OUT.partial` as they come (resumable), or kept for standard output."""

    def __init__(self, partial: PartialRecords | None, output: str | None) -> None:
        self.partial, self.target = partial, output
        self.output = output_name(output)
        self.resume = partial is not None and partial.resume
        self.kept: dict[str, dict] = {}
        self.done = partial.done if partial is not None else {}

    def add(self, ids: list[str], results: Results) -> None:
        records = list(results)
        if self.partial is not None:
            self.partial.add(records)
        else:
            self.kept.update(zip(ids, records, strict=True))

    def discard(self) -> None:
        if self.partial is not None:
            self.partial.discard()

    def finish(self, order: Sequence[str], check: Callable[[list[dict]], None] | None = None) -> int:
        """Write OUT (or standard output) with the records of `order`, in that order. `check` sees them first and
        may refuse them (a VLToolsError): then nothing is written and OUT.partial goes too, since results refused
        as a whole are not worth resuming."""
        if check is not None:
            try:
                check([(self.partial.done if self.partial is not None else self.kept)[i] for i in order])
            except VLToolsError:
                if self.partial is not None:
                    self.partial.remove()
                raise
        if self.partial is not None:
            return self.partial.finish(order)
        return write_records(self.target, (self.kept[i] for i in order))


@contextlib.contextmanager
def records_writer(output: str | None, key: str, resume: bool, options: dict[str, object],
                   inputs: dict[str, str]) -> Iterator[RecordsWriter | None]:
    """The records writer of OUT: resumable through `OUT.partial` (refused on other options or inputs), or
    standard output; a failure discards a partial file that holds no finished record. None on the other processes
    of a torchrun job, whose records the first writes."""
    if not place().main:
        yield None
        return
    if is_stdout(output):
        yield RecordsWriter(None, output)
        return
    with PartialRecords(output, key, resume, options, inputs) as partial:
        yield RecordsWriter(partial, output)


class FeaturesPartsWriter:
    """Rows of a features HDF5 committed to parts in `OUT.partial/` (see vltools.io.parts)."""

    def __init__(self, parts: PartsWriter) -> None:
        self.parts = parts
        self.done = parts.done
        self.resume = parts.resume
        self.output = parts.output

    def add(self, ids: list[str], results: Results) -> None:
        self.parts.add(ids, **results)

    def discard(self) -> None:
        self.parts.discard()


@contextlib.contextmanager
def features_writer(out: str | None, attrs: dict[str, object], dtype: str, commit_seconds: float, resume: bool,
                    digests: dict[str, str]) -> Iterator[FeaturesPartsWriter | None]:
    """Parts under `OUT.partial/` (covered by the lock of OUT), or in a spool folder when OUT is standard output or a
    device; rows whose input digest changed since an interrupted run are recomputed; errors about rows name OUT
    (or standard output), not a part. None on the other processes of a torchrun job, whose rows the first
    writes."""
    if not place().main:
        yield None
        return
    with contextlib.ExitStack() as stack:
        if is_stdout(out) or is_device(out):
            folder = stack.enter_context(scratch_folder()) / "parts"
        else:
            folder = Path(f"{out}.partial")
        yield FeaturesPartsWriter(PartsWriter(folder, attrs, dtype, commit_seconds, resume, digests,
                                              output_name(out)))


def finish_features(writer: FeaturesPartsWriter, out: str | None, attrs: dict[str, object], order: Sequence[str],
                    failed: list[str]) -> int:
    """Merge the parts into OUT (atomically, or to standard output) in `order`, with the failure lines."""
    with written(out) as target:
        count = writer.parts.merge_into(target, attrs, order, failed)
    writer.parts.remove()
    return count


@contextlib.contextmanager
def committed(stage: str, out: str | None, ids: Sequence[str], compute: Callable[[list[int]], Iterator[np.ndarray]],
              unit: str, batch_size: int, rows: dict[str, object], digests: dict[str, str],
              resume: bool) -> Iterator[Iterator[np.ndarray] | None]:
    """One float32 row per id of `ids` through `run`, which commits the rows to `OUT.partial/` as they come (each
    as its part's /global row: encode's embeddings, match's columns of similarities); `compute(positions)` yields
    the [B, ...] rows of the items at those positions of `ids`, in blocks of `batch_size`. Then yield every row of
    `ids` in order, in blocks, for the caller to write, and remove the parts once the caller is done (a failed
    write keeps them for --resume). `rows` (attributes) are what the rows depend on, which a resumed run must
    share, and `digests` each id's inputs (a row whose input changed is computed again). None on the other
    processes of a torchrun job, whose rows the first writes. Into standard output (or a device) in one process,
    where nothing could be resumed, the rows come straight from `compute`, with no parts on disk."""
    if not place().active and (is_stdout(out) or is_device(out)):
        yield progress(compute(list(range(len(ids)))), total=len(ids), desc=stage, unit=unit, size=len)
        return
    position = {item: number for number, item in enumerate(ids)}

    def produce(todo: list[str]) -> Iterator[tuple[list[str], dict[str, np.ndarray]]]:
        start = 0
        for block in compute([position[i] for i in todo]):
            yield todo[start:start + len(block)], {"global": block}
            start += len(block)

    with features_writer(out, rows, "float32", COMMIT_SECONDS, resume, digests) as writer:
        run(stage, ids, writer, produce, unit, batch_size)
        if writer is None:
            yield None
            return
        yield (arrays["global"] for _, arrays in writer.parts.rows(ids))
        writer.parts.remove()
