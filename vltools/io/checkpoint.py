"""What a resumable stage has finished: one checkpoint for every per-item stage (extract-regions, segment-pool,
concept-scores, encode, caption, match over features).

A run writing OUT keeps its finished items in the folder `OUT.partial/`: first `state.json` (the stage's options),
then chunks `chunk-NNNNNN.h5` (HDF5 rows of named arrays) or `chunk-NNNNNN.jsonl` (records), each written under a
temporary name and renamed once whole: within `commit_seconds` of the last commit, and when the run stops (Ctrl-C,
SIGTERM, an error). A killed run leaves only whole chunks. With every item its chunk keeps the digest of the item's
inputs (files, sizes, times, boxes).

The resume rule, the same for every stage: a run without `--resume` beside finished chunks refuses to start (it never
destroys them); `--resume` continues the same run: options that differ are refused, naming the first, and an item
whose inputs changed since it was finished is computed again (the run says how many). When the output is written,
the folder goes. Where there is no file to resume (standard output, a device, results returned in memory), the same
checkpoint lives in a scratch folder and goes with the run."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from vltools.errors import VLToolsError, argument
from vltools.io.hdf5 import decode_strings, open_h5, string_dtype
from vltools.io.jsonl import iter_json_lines, json_writer
from vltools.io.progress import log
from vltools.io.rows import NONFINITE_FIX, RowsWriter
from vltools.io.write_errors import output_error

STATE = "state.json"
FORMAT = "vltools-checkpoint/1"
CHUNK = re.compile(r"chunk-(\d{6})\.(h5|jsonl)(\.tmp)?")
OPEN_READERS = 64     # chunks read at once when rows are gathered in order (the least recently read is closed)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) and SIGTERM while the block writes, then act on them: a write they would cut in half
    (a chunk whose datasets and ids disagree) is finished first. Python handles signals in the main thread
    only; in another thread the block runs as it is."""
    pending: list[int] = []
    try:
        previous = {number: signal.signal(number, lambda got, _: pending.append(got))
                    for number in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:     # not the main thread
        yield
        return
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if pending:
            signal.raise_signal(pending[0])


def _plain(value: object) -> object:
    """`value` as it reads back from JSON (tuples become lists), so saved and current options compare equal."""
    return json.loads(json.dumps(value))


class ChunkWriter(Protocol):
    def add(self, ids: Sequence[str], results: object, digests: Sequence[str]) -> None: ...

    def close(self) -> None: ...

    def abandon(self) -> None: ...


class Rows:
    """The HDF5 codec: each item a row of named arrays (features, embeddings, a caption's similarities), floats
    stored as `dtype` (or as `dtypes` names); a non-finite row is refused as it comes, naming its `id_kind` id
    and `fix`."""

    suffix = "h5"

    def __init__(self, dtype: str = "float32", dtypes: Mapping[str, object] | None = None, id_kind: str = "id",
                 fix: str = NONFINITE_FIX) -> None:
        self.dtype, self.dtypes, self.id_kind, self.fix = dtype, dict(dtypes or {}), id_kind, fix

    def writer(self, path: Path, name: str) -> ChunkWriter:
        return _RowsChunk(RowsWriter(path, "checkpoint chunk", {}, self.dtype, name, self.id_kind, self.fix,
                                     self.dtypes))

    def digests(self, path: Path) -> tuple[list[str], list[str]]:
        """The ids of chunk `path` and the digest of each one's inputs."""
        with open_h5(path) as handle:
            return decode_strings(handle["ids"][:]), decode_strings(handle["input_digests"][:])

    def gather(self, chunks: Sequence[Path], owner: Mapping[str, tuple[int, int]],
               order: Sequence[str], block: int) -> Iterator[tuple[list[str], dict[str, np.ndarray]]]:
        """Blocks of `block` rows of `order`, each row read from the chunk and row `owner` names."""
        handles: dict[int, object] = {}
        try:
            for start in range(0, len(order), block):
                ids = list(order[start:start + block])
                wanted: dict[int, list[int]] = {}
                for item in ids:
                    wanted.setdefault(owner[item][0], []).append(owner[item][1])
                fetched: dict[tuple[int, int], dict[str, np.ndarray]] = {}
                for number, rows in wanted.items():
                    if number not in handles:
                        if len(handles) >= OPEN_READERS:
                            handles.pop(next(iter(handles))).close()
                        handles[number] = open_h5(chunks[number])
                    handle = handles[number]
                    unique = sorted(set(rows))
                    arrays = {name: handle[name][unique] for name in handle if name not in ("ids", "input_digests")}
                    for position, row in enumerate(unique):
                        fetched[number, row] = {name: values[position] for name, values in arrays.items()}
                names = fetched[owner[ids[0]]].keys()
                yield ids, {name: np.stack([fetched[owner[item]][name] for item in ids]) for name in names}
        finally:
            for handle in handles.values():
                handle.close()


class _RowsChunk:
    def __init__(self, writer: RowsWriter) -> None:
        self.writer = writer
        self.digests: list[str] = []

    def add(self, ids: Sequence[str], results: object, digests: Sequence[str]) -> None:
        self.writer.add(ids, **results)
        self.digests += digests

    def close(self) -> None:
        self.writer.handle.create_dataset("input_digests", data=np.array(self.digests, dtype=object),
                                          dtype=string_dtype())
        self.writer.close()

    def abandon(self) -> None:
        self.writer.abandon()


class Records:
    """The JSONL codec: each item one record (a dict), kept with its id and the digest of its inputs."""

    suffix = "jsonl"

    def writer(self, path: Path, name: str) -> ChunkWriter:
        return _RecordsChunk(path)

    def digests(self, path: Path) -> tuple[list[str], list[str]]:
        lines = [value for _, value in iter_json_lines(path, "delete the folder and run again")]
        return [line["id"] for line in lines], [line["input_digest"] for line in lines]

    def gather(self, chunks: Sequence[Path], owner: Mapping[str, tuple[int, int]],
               order: Sequence[str], block: int) -> Iterator[tuple[list[str], list[dict]]]:
        """Blocks of `block` records of `order`, each from the chunk `owner` names."""
        wanted = sorted({number for number, _ in owner.values()})
        records = {}
        for number in wanted:
            for _, line in iter_json_lines(chunks[number], "delete the folder and run again"):
                if owner.get(line["id"], (None,))[0] == number:
                    records[line["id"]] = line["record"]
        for start in range(0, len(order), block):
            ids = list(order[start:start + block])
            yield ids, [records[item] for item in ids]


class _RecordsChunk:
    def __init__(self, path: Path) -> None:
        self.stream = open(path, "w", encoding="utf-8", newline="\n")   # noqa: SIM115 (closed by close/abandon)
        self.lines = json_writer(self.stream)

    def add(self, ids: Sequence[str], results: object, digests: Sequence[str]) -> None:
        for item, record, digest in zip(ids, results, digests, strict=True):
            self.lines.write({"id": item, "input_digest": digest, "record": record})
        self.stream.flush()

    def close(self) -> None:
        os.fsync(self.stream.fileno())
        self.stream.close()

    def abandon(self) -> None:
        self.stream.close()


Codec = Rows | Records


def committed_chunks(folder: Path, resume: bool) -> list[Path]:
    """The chunks an interrupted run committed in checkpoint folder `folder` (none when it does not exist); an
    older layout, a file no run wrote there, and a plain run (not `resume`) beside committed chunks are refused.
    Reads names only, so that a stage can ask before it loads its models."""
    if folder.exists() and not folder.is_dir():
        raise VLToolsError(f"{folder}: a file left by an older vltools (OUT.partial is now a folder); delete it "
                           "and run again")
    names = sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []
    if any(name.startswith("part-") for name in names) and STATE not in names:
        raise VLToolsError(f"{folder}: left by an older vltools (part-NNNNNN.h5 files); delete it and run again")
    foreign = [name for name in names if name != STATE and not CHUNK.fullmatch(name)]
    if foreign:
        raise VLToolsError(f"{folder}: holds {foreign[0]}, which no vltools run wrote there (it holds only "
                           f"{STATE} and chunk-NNNNNN files), and the run would remove it with the folder; move "
                           "it away")
    chunks = [folder / name for name in names if CHUNK.fullmatch(name) and not name.endswith(".tmp")]
    if chunks and not resume:
        raise VLToolsError(f"{folder}: left by an interrupted run; continue it with {argument('resume', 'True')}, "
                           "or delete it")
    return chunks


class Checkpoint:
    """The finished items of a run writing `name` (the user's name of the output), kept in `folder`.

    `options` are what every item depends on (a resumed run must share them); `digests` each item's inputs (by
    id; a string: the same for every item). `done` holds the ids finished; `add` keeps more, `gather` reads them
    back in any order; a failure calls `discard`, the written output `remove`. `resumable` says whether a rerun
    with --resume can find `folder` (`OUT.partial/`), or it is a scratch folder that goes with this run."""

    def __init__(self, folder: Path, name: str, codec: Codec, options: Mapping[str, object],
                 digests: Mapping[str, str] | str, resume: bool, commit_seconds: float, resumable: bool = True) -> None:
        self.folder, self.output, self.codec, self.resume = folder, name, codec, resume
        self.resumable = resumable
        self.commit_seconds = commit_seconds
        self._digests = digests
        self.state = {"format": FORMAT, "codec": codec.suffix, "options": _plain(dict(options))}
        self.chunks = self._open(resume)
        self.owner: dict[str, tuple[int, int]] = {}
        stale: set[str] = set()
        for number, chunk in enumerate(self.chunks):
            ids, saved = codec.digests(chunk)
            for row, (item, digest) in enumerate(zip(ids, saved, strict=True)):
                if self.digest(item) == digest:
                    self.owner[item] = (number, row)
                else:
                    stale.add(item)
        changed = len(stale - set(self.owner))
        if changed:
            log.warning("%s: the inputs of %d finished items changed since the interrupted run (file, size, time or "
                        "boxes); they are computed again", folder, changed)
        self._writer: ChunkWriter | None = None
        self._whole = True        # whether every item of the open chunk was written whole (no add failed in it)
        self._ids: list[str] = []
        self._committed = time.monotonic()

    @property
    def done(self) -> set[str]:
        return set(self.owner)

    def digest(self, item: str) -> str:
        """The digest of item `item`'s inputs."""
        return self._digests if isinstance(self._digests, str) else self._digests.get(item, "")

    def _open(self, resume: bool) -> list[Path]:
        """Check the folder (`committed_chunks`; other options are refused too), write the state first when
        starting, and return the committed chunks."""
        folder = self.folder
        chunks = committed_chunks(folder, resume)
        try:
            if chunks:
                self._check_state()
            else:
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                tmp = folder / f"{STATE}.tmp"
                tmp.write_text(json.dumps(self.state), encoding="utf-8")
                os.replace(tmp, folder / STATE)
            for stale in folder.glob("chunk-*.tmp"):
                stale.unlink()
        except OSError as exc:
            raise output_error(folder, exc) from exc
        return chunks

    def _check_state(self) -> None:
        """Refuse to continue a run made with other options or another codec, naming the first difference."""
        again = f"resume with the same options, or delete {self.folder} and run without {argument('resume', 'True')}"
        try:
            saved = json.loads((self.folder / STATE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = None
        if not isinstance(saved, dict) or saved.get("format") != FORMAT or saved.get("codec") != self.codec.suffix:
            raise VLToolsError(f"{self.folder}: its {STATE} is missing or not this stage's; delete the folder and run "
                               "again")
        old, new = saved.get("options") or {}, self.state["options"]
        for name in [*new, *(name for name in old if name not in new)]:
            if old.get(name) != new.get(name):
                raise VLToolsError(f"{self.folder}: the interrupted run used {name} {old.get(name)!r}, this run "
                                   f"{new.get(name)!r}; {again}")

    def add(self, ids: list[str], results: object) -> None:
        """Keep finished items; commit the open chunk once `commit_seconds` have passed since the last commit. A
        failed write (full disk) is one line naming the output; the chunk it failed in is then dropped by
        `discard`. Ctrl-C and SIGTERM wait until the items are written, so that the chunk stays whole."""
        with signals_held():
            try:
                if self._writer is None:
                    number = int(CHUNK.fullmatch(self.chunks[-1].name).group(1)) + 1 if self.chunks else 0
                    self._path = self.folder / f"chunk-{number:06d}.{self.codec.suffix}.tmp"
                    self._writer = self.codec.writer(self._path, self.output)
                self._writer.add(ids, results, [self.digest(item) for item in ids])
            except BaseException as exc:
                self._whole = False
                if isinstance(exc, OSError):
                    raise output_error(self.output, exc) from exc
                raise
            start = len(self._ids)
            self._ids.extend(ids)
            self.owner.update({item: (len(self.chunks), start + row) for row, item in enumerate(ids)})
            if time.monotonic() - self._committed >= self.commit_seconds:
                self.commit()

    def commit(self) -> None:
        """Close the open chunk and rename it to its final name, making its items durable."""
        self._committed = time.monotonic()
        if self._writer is None:
            return
        with signals_held():
            try:
                self._writer.close()
            except BaseException as exc:
                self._whole = False
                self.discard()
                if isinstance(exc, OSError):
                    raise output_error(self.output, exc) from exc
                raise
            final = self._path.with_name(self._path.name.removesuffix(".tmp"))
            os.replace(self._path, final)
            self.chunks.append(final)
            self._writer, self._ids = None, []

    def discard(self) -> None:
        """After a failure or an interruption: commit the open chunk when its items were all written whole (they
        are finished items for --resume), else drop it; remove the folder when it holds no finished chunk."""
        if self._writer is not None and self._whole:
            with contextlib.suppress(Exception):    # a failed commit drops the chunk; the run's own error stands
                self.commit()
        if self._writer is not None:
            self._writer.abandon()
            self._path.unlink(missing_ok=True)
            self._writer = None
            for item in self._ids:
                self.owner.pop(item, None)
            self._ids = []
        self._whole = True
        if not self.chunks:
            shutil.rmtree(self.folder, ignore_errors=True)

    def gather(self, order: Sequence[str], block: int = 256) -> Iterator[tuple[list[str], object]]:
        """Commit, then the items of `order` (all finished) in that order, in blocks of (ids, results)."""
        self.commit()
        return self.codec.gather(self.chunks, self.owner, [item for item in order if item in self.owner], block)

    def remove(self) -> None:
        """Delete the folder (once the output is safely in place, or when its results were refused as a whole)."""
        self.owner.clear()
        shutil.rmtree(self.folder, ignore_errors=True)
