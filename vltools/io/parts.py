"""Resumable writing and merging of features files.

A long run, with or without `--resume`, writes its rows into a folder of part files
(`OUT.h5.partial/part-000000.h5`, ...). Each part is written under a temporary name and renamed when complete,
so a run killed at any moment (even by SIGKILL) leaves only complete parts: `--resume` keeps them and recomputes
nothing they hold. A part is committed once `commit_seconds` have passed since the last commit (or since the run
began): a SIGKILL loses at most that much work or the batch in progress, and Ctrl-C, SIGTERM or an error lose
nothing finished (`discard` commits the open part). When the run ends, the parts are merged into the output
(atomically) and the folder is removed. `vltools merge` uses the same streaming merge to join the outputs of
`--shard i/n` runs; a merge keeps at most `OPEN_READERS` files open, so thousands of parts stay under the
open-files limit.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError
from vltools.io.features import IDS_CHECKSUM, FeaturesReader, FeaturesWriter
from vltools.io.hdf5 import REWRITE, OutputFile, decode_strings, string_dtype
from vltools.io.partial import INTERRUPTED
from vltools.io.progress import log
from vltools.io.write_errors import output_error

# provenance: where a file's rows came from and how it was made (kept per part by a merge, never compared)
PROVENANCE_ATTRS = {"vltools_version", "command", "created", "shard", "inputs_digest", "source", "split",
                    "merged_from", "parts"}
# attributes that describe the file rather than what its features are (dtype is compared on the datasets)
BOOKKEEPING_ATTRS = PROVENANCE_ATTRS | {"format", "format_version", "num_failed", "dtype", IDS_CHECKSUM}
WRITER_ATTRS = {"format", "format_version", "vltools_version", "command", "created", "dtype", "num_failed",
                IDS_CHECKSUM}
MERGE_BLOCK = 256
OPEN_READERS = 64     # parts a merge holds open at once (the least recently read is closed)
PART_NAME = re.compile(r"part-\d{6}\.h5(\.tmp)?")    # what a parts folder holds: parts, and one being written


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) and SIGTERM while the block writes, then act on them: a write they would cut in half
    (an HDF5 part whose datasets and ids disagree) is finished first. Python handles signals in the main thread
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


def is_provenance(key: str) -> bool:
    """Whether attribute `key` records where rows came from (source, command, time, digests...)."""
    return key in PROVENANCE_ATTRS or key.endswith("_digest")


def comparable_attrs(attrs: dict[str, object]) -> dict[str, str]:
    """The attributes two files must share to be merged: what the features are (backbone, weights, regions,
    sizes...), not where they came from."""
    return {k: str(v) for k, v in attrs.items() if k not in BOOKKEEPING_ATTRS and not is_provenance(k)}


def parts_provenance(path: Path, attrs: dict[str, object]) -> list[dict[str, str]]:
    """The provenance of one file to merge: its own (with its file name), or its parts' if it is a merge."""
    if "parts" in attrs:
        try:
            parts = json.loads(attrs["parts"])
        except (ValueError, RecursionError):
            parts = None
        if not isinstance(parts, list) or not all(isinstance(part, dict) for part in parts):
            raise VLToolsError(f"{path}: attribute 'parts' is not the JSON list of the merged files' provenance; "
                               f"{REWRITE}")
        return parts
    return [{"file": path.name, **{k: str(v) for k, v in attrs.items() if is_provenance(k)}}]


def merge_files(paths: Sequence[Path], target: Path) -> int:
    """`vltools merge`: the rows of `paths` in order into `target`, which keeps the options the files share
    and, in its `parts` attribute (JSON), each part's provenance; /failed lists are concatenated."""
    with FeaturesReader(paths[0]) as first:
        attrs = {k: v for k, v in first.attrs.items() if not is_provenance(k)}
    failed: list[str] = []
    parts: list[dict[str, str]] = []
    for path in paths:
        with FeaturesReader(path) as reader:
            failed += reader.failed
            parts += parts_provenance(path, reader.attrs)
    attrs["parts"] = json.dumps(parts)
    return merge_features(paths, target, attrs, failed=failed)


def check_compatible(reference: FeaturesReader, other: FeaturesReader) -> None:
    """Raise a one-line error naming `other` when its options, fields, shapes or dtypes differ."""
    mine, theirs = comparable_attrs(reference.attrs), comparable_attrs(other.attrs)
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            raise VLToolsError(f"{other.path}: attribute {key!r} is {theirs.get(key)!r} but {reference.path} has "
                               f"{mine.get(key)!r}; only files made with the same options can be merged")
    if reference.fields != other.fields:
        raise VLToolsError(f"{other.path}: has datasets {other.fields} but {reference.path} has {reference.fields}; "
                           "only files made with the same options can be merged")
    for field in reference.fields:
        a, b = reference.handle[field], other.handle[field]
        if a.shape[1:] != b.shape[1:] or a.dtype != b.dtype:
            raise VLToolsError(f"{other.path}: /{field} rows are {b.shape[1:]} {b.dtype} but {reference.path} has "
                               f"{a.shape[1:]} {a.dtype}; only files made with the same options can be merged")


def merge_features(sources: Sequence[Path], target: Path, attrs: dict[str, object],
                   order: Sequence[str] | None = None, failed: Sequence[str] = ()) -> int:
    """Stream the rows of features files `sources` into a new file `target`; return the row count.

    Rows follow `order` (ids, each in some source) when given, else the sources' concatenation. The files
    must agree (check_compatible) and must not share ids. Never holds more than a block of rows in memory, nor
    more than `OPEN_READERS` files open. `attrs` are the new file's attributes; its provenance (command, time,
    version) is this process's.
    """
    owner, dtype = _owners(sources)
    kept = {k: v for k, v in attrs.items() if k not in WRITER_ATTRS}
    with FeaturesWriter(target, kept, dtype=dtype) as writer:
        if order is None:
            for path in sources:
                with FeaturesReader(path) as reader:
                    for ids, arrays in reader.iter_batches(MERGE_BLOCK):
                        writer.add(ids, **arrays)
        else:
            for ids, arrays in _in_order(sources, owner, order):
                writer.add(ids, **arrays)
        writer.set_failed(failed)
        return len(writer.ids)


def _owners(sources: Sequence[Path]) -> tuple[dict[str, int], str]:
    """Which of `sources` holds each id, after checking that they agree and share no id; and their dtype."""
    owner: dict[str, int] = {}
    with FeaturesReader(sources[0]) as first:
        for number, path in enumerate(sources):
            with FeaturesReader(path) as reader:
                check_compatible(first, reader)
                for image_id in reader.ids:
                    if image_id in owner:
                        raise VLToolsError(f"{reader.path}: image id {image_id!r} is also in "
                                           f"{sources[owner[image_id]]}; merge each once")
                    owner[image_id] = number
        return owner, first.attrs.get("dtype", "float16")


def _in_order(sources: Sequence[Path], owner: dict[str, int],
              order: Sequence[str]) -> Iterator[tuple[list[str], dict[str, np.ndarray]]]:
    """(ids, arrays) blocks of `MERGE_BLOCK` rows of `order`, each row fetched from the source `owner` names; at most
    `OPEN_READERS` sources are open at once (the least recently read is closed, and opened again if needed)."""
    readers: OrderedDict[int, FeaturesReader] = OrderedDict()

    def reader(number: int) -> FeaturesReader:
        if number in readers:
            readers.move_to_end(number)
        else:
            if len(readers) >= OPEN_READERS:
                readers.popitem(last=False)[1].close()
            readers[number] = FeaturesReader(sources[number])
        return readers[number]

    try:
        for start in range(0, len(order), MERGE_BLOCK):
            ids = list(order[start:start + MERGE_BLOCK])
            by_source: dict[int, list[str]] = {}
            for image_id in ids:
                by_source.setdefault(owner[image_id], []).append(image_id)
            fetched = {number: reader(number).read(chunk) for number, chunk in by_source.items()}
            position = {image_id: (number, row) for number, chunk in by_source.items()
                        for row, image_id in enumerate(chunk)}
            fields = next(iter(fetched.values())).keys()
            yield ids, {field: np.stack([fetched[position[i][0]][field][position[i][1]] for i in ids])
                        for field in fields}
    finally:
        for open_reader in readers.values():
            open_reader.close()


class PartsWriter:
    """Rows of an unfinished run, committed to complete part files once `commit_seconds` have passed since the
    last commit (or since the writer was made), and when the run fails or is interrupted (`discard`).

    Each part stores, beside its rows, `/input_digests`: the digest of each row's input (`digests`, by id;
    see vltools.io.provenance.input_digest). On `resume`, rows whose input changed since are dropped from
    their part and so recomputed; without `resume`, finished parts are refused (as `OUT.partial` records are)
    rather than deleted. The caller holds the lock of the output the folder belongs to (vltools.io.lock). Errors
    about rows (a value float16 cannot hold) name `output`, the user's name of the file the parts become (the -o
    path, or "standard output"), never a part under the folder, which may be in the temporary folder.
    """

    def __init__(self, folder: Path, attrs: dict[str, object], dtype: str, commit_seconds: float,
                 resume: bool, digests: dict[str, str] | None = None, output: str | None = None) -> None:
        self.folder = folder
        self.output = str(folder) if output is None else output
        self.attrs = attrs
        self.dtype = dtype
        self.commit_seconds = commit_seconds
        self.digests = digests or {}
        self.resume = resume
        if folder.exists() and not folder.is_dir():
            raise VLToolsError(f"{folder}: is a file, not the folder of parts an interrupted vltools run leaves; "
                               "move it away")
        foreign = sorted(path.name for path in folder.iterdir() if not PART_NAME.fullmatch(path.name)) \
            if folder.is_dir() else []
        if foreign:
            raise VLToolsError(f"{folder}: holds {foreign[0]}, which no vltools run wrote there (it holds only "
                               "part-NNNNNN.h5 files), and the run would remove it with the folder; move it away")
        if not resume and any(folder.glob("part-*.h5")):
            raise VLToolsError(f"{folder}: {INTERRUPTED}")
        try:
            folder.mkdir(exist_ok=True)
        except OSError as exc:
            raise output_error(folder, exc) from exc
        for stale in folder.glob("part-*.h5.tmp"):
            stale.unlink()
        self.parts = sorted(folder.glob("part-*.h5"))
        self.done: set[str] = set()
        self.changed = 0
        for part in list(self.parts):
            with FeaturesReader(part) as reader:
                self._check_options(part, reader.attrs)
                saved = decode_strings(reader.handle["input_digests"][:]) if "input_digests" in reader.handle \
                    else [""] * len(reader.ids)
                ids = list(reader.ids)
            keep = [i for i, digest in zip(ids, saved, strict=True) if self.digests.get(i, digest) == digest]
            if len(keep) < len(ids):
                self.changed += len(ids) - len(keep)
                self._rewrite(part, keep)
            self.done.update(keep)
        if self.changed:
            log.warning("%s: the inputs of %d finished items changed since the interrupted run (file, size, time or "
                        "boxes); they are computed again", folder, self.changed)
        self._writer: FeaturesWriter | None = None
        self._whole = True        # whether every row of the open part was written whole (no add failed in it)
        self._ids: list[str] = []
        self._committed = time.monotonic()

    def _rewrite(self, part: Path, keep: list[str]) -> None:
        """Replace `part` by its rows of `keep` (ids whose input is unchanged), or remove it when none are."""
        if not keep:
            part.unlink()
            self.parts.remove(part)
            return
        tmp = Path(f"{part}.tmp")
        try:
            merge_features([part], tmp, self.attrs, keep)
            with OutputFile(tmp, "a") as handle:
                handle.create_dataset("input_digests", data=np.array([self.digests.get(i, "") for i in keep],
                                                                     dtype=object), dtype=string_dtype())
            os.replace(tmp, part)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise output_error(self.output, exc) from exc

    def _check_options(self, part: Path, attrs: dict[str, object]) -> None:
        mine, theirs = comparable_attrs(self.attrs), comparable_attrs(attrs)
        for key in sorted(set(mine) | set(theirs)):
            if mine.get(key) != theirs.get(key):
                raise VLToolsError(f"{part}: the interrupted run used {key}={theirs.get(key)!r}, this run "
                                   f"{mine.get(key)!r}; resume with the same options, or remove {self.folder} "
                                   "to start over")

    def _next_path(self) -> Path:
        number = int(self.parts[-1].name[5:11]) + 1 if self.parts else 0
        return self.folder / f"part-{number:06d}.h5"

    def add(self, ids: Sequence[str], **arrays: np.ndarray) -> None:
        """Append rows; commit the open part once `commit_seconds` have passed since the last commit. A failed write
        (full disk) is one line naming the output; the part it failed in is then dropped by `discard`. Ctrl-C and
        SIGTERM wait until the rows are written (`signals_held`), so that the part stays whole for `discard`."""
        with signals_held():
            try:
                if self._writer is None:
                    self._writer = FeaturesWriter(Path(f"{self._next_path()}.tmp"), self.attrs, dtype=self.dtype,
                                                  name=self.output)
                self._writer.add(ids, **arrays)
            except BaseException as exc:
                self._whole = False
                if isinstance(exc, OSError):
                    raise output_error(self.output, exc) from exc
                raise
            self._ids.extend(ids)
            self.done.update(ids)
            if time.monotonic() - self._committed >= self.commit_seconds:
                self.commit()

    def commit(self) -> None:
        """Close the open part and rename it to its final name, making its rows durable (Ctrl-C and SIGTERM wait
        until it is done)."""
        self._committed = time.monotonic()
        if self._writer is None:
            return
        with signals_held():
            tmp = self._writer.path
            try:
                self._writer.handle.create_dataset(
                    "input_digests", data=np.array([self.digests.get(i, "") for i in self._ids], dtype=object),
                    dtype=string_dtype())
                self._writer.close()
            except BaseException as exc:
                self._whole = False
                self.discard()
                if isinstance(exc, OSError):
                    raise output_error(self.output, exc) from exc
                raise
            self._writer = None
            self._ids = []
            final = Path(str(tmp)[: -len(".tmp")])
            os.replace(tmp, final)
            self.parts.append(final)

    def discard(self) -> None:
        """After a failure or an interruption: commit the open part when its rows were all written whole (they are
        finished items for --resume), else drop it; remove the folder when it holds no finished part."""
        if self._writer is not None and self._whole:
            with contextlib.suppress(Exception):    # a failed commit drops the part; the run's own error stands
                self.commit()
        if self._writer is not None:
            self._writer.abandon()
            self._writer.path.unlink(missing_ok=True)
            self._writer = None
            self.done.difference_update(self._ids)
            self._ids = []
        self._whole = True
        if not any(self.folder.glob("part-*.h5")):
            shutil.rmtree(self.folder, ignore_errors=True)

    def merge_into(self, target: Path, attrs: dict[str, object], order: Sequence[str],
                   failed: Sequence[str]) -> int:
        """Commit, then merge every part into `target` in `order` (ids not written are left out). When `target`
        cannot be written (full disk), the parts of a resumable run (`OUT.partial`) are kept, and the error says
        so."""
        self.commit()
        present = [image_id for image_id in order if image_id in self.done]
        if self.parts:
            try:
                return merge_features(self.parts, target, attrs, present, failed)
            except OSError as exc:
                if exc.filename != str(target) or str(self.folder) != f"{self.output}.partial":
                    raise
                raise output_error(self.output, exc, f"the {len(self.done)} finished images are kept in "
                                                     f"{self.folder}: rerun with --resume to merge them") from exc
        with FeaturesWriter(target, {k: v for k, v in attrs.items() if k not in WRITER_ATTRS},
                            dtype=self.dtype) as writer:
            writer.set_failed(failed)
        return 0

    def rows(self, order: Sequence[str]) -> Iterator[tuple[list[str], dict[str, np.ndarray]]]:
        """Commit, then the rows of `order` (all finished) in that order, in (ids, arrays) blocks, without writing a
        merged file (`encode` streams them into its embeddings file)."""
        self.commit()
        return _in_order(self.parts, _owners(self.parts)[0] if self.parts else {}, order)

    def remove(self) -> None:
        """Delete the parts folder (once the merged output is safely in place)."""
        shutil.rmtree(self.folder)
