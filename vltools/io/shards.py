"""Sets of parts: one output written by many processes, each its own file, nothing passing through one of them.

A per-item stage run under torchrun, or with `--shard I/N` and `-o` a folder, writes `FOLDER/part-KKKKK-of-NNNNN.EXT`:
the K-th of N contiguous runs of its inputs, cut at its batches' edges (so that every batch is the batch one process
makes, and so are its results). Each part is an ordinary output of its own, with its own lock, checkpoint
(`part-....EXT.partial/`) and resume; read in the order of their numbers, the parts hold the rows one process would
have written, in its order. Every stage that reads features, embeddings or captions takes the folder as one input
once every part is in it (`part_files`), and `vltools merge FOLDER` joins them when one file is wanted.

No torch, no numpy: the stages ask before they load anything.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from vltools.errors import VLToolsError
from vltools.io.write_errors import output_error

PART = re.compile(r"part-(\d{5})-of-(\d{5})\.(h5|jsonl)")
MAX_PARTS = 99999
TORCHRUN_STDOUT = "under torchrun each process writes its own part: give -o FOLDER, which the parts go in"


@dataclass(frozen=True)
class Part:
    """Which inputs a process takes and where it writes them. `cuts` are the (i, n) choices that lead to its
    inputs, outermost first: `--shard i/n`, then the torchrun process's (RANK, WORLD_SIZE). With `in_folder`, it
    writes part `index` of `count` of a set in a folder, which holds `whole` (the inputs of the shard `whole`, "0/1":
    all of them); without, one file of its own (`--shard i/n -o FILE`)."""

    index: int
    count: int
    cuts: tuple[tuple[int, int], ...]
    in_folder: bool
    whole: str = "0/1"

    def span(self, total: int, batch: int = 1) -> tuple[int, int]:
        """The positions [start, stop) among `total` inputs this process takes: the i-th of n contiguous runs of
        whole batches of `batch`, cut again for each further (i, n)."""
        start, stop = 0, total
        for index, count in self.cuts:
            batches = -(-(stop - start) // batch)
            first, last = index * batches // count, (index + 1) * batches // count
            start, stop = min(start + first * batch, stop), min(start + last * batch, stop)
        return start, stop

    @property
    def name(self) -> str:
        """"k/K": this part's place in its set."""
        return f"{self.index}/{self.count}"

    def attrs(self, total: int, batch: int = 1) -> dict[str, object]:
        """What a part's file records of its place in its set (nothing for a file of its own): `part` "k/K" and
        `span` "start:stop/total", which the set's reader checks (the parts must cover every input once)."""
        if not self.in_folder:
            return {}
        start, stop = self.span(total, batch)
        return {"part": self.name, "span": f"{start}:{stop}/{total}"}


def this_part(shard: tuple[int, int] | None, rank: int, world_size: int, folder: bool) -> Part | None:
    """Which inputs this process takes, or None for all of them: `shard` is `--shard`'s (i, n), (rank,
    world_size) the process's place in a torchrun job, `folder` whether the output names a folder (one that
    exists, or a path ending in /). Under torchrun each process writes part RANK of WORLD_SIZE of the set of its
    shard; without, `--shard i/n` with a folder writes part i of n of the set of every input."""
    cuts = ([shard] if shard is not None else []) + ([(rank, world_size)] if world_size > 1 else [])
    if not cuts:
        return None
    if world_size > 1:
        return Part(rank, world_size, tuple(cuts), True, "0/1" if shard is None else f"{shard[0]}/{shard[1]}")
    if shard[1] > MAX_PARTS:
        raise VLToolsError(f"--shard {shard[0]}/{shard[1]}: at most {MAX_PARTS} parts in a set")
    return Part(shard[0], shard[1], tuple(cuts), folder)


def names_folder(out: str | os.PathLike) -> bool:
    """Whether output `out` names a folder of parts: an existing folder, or a path ending in a slash."""
    text = os.fspath(out)
    return text.endswith(("/", os.sep)) or Path(text).is_dir()


def part_path(folder: str | os.PathLike, part: Part, suffix: str) -> str:
    """The file of `part` in `folder` (created, with its parents' existence checked by the caller's output rules)."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise VLToolsError(f"{folder}: is a file, and the parts of this run go in a folder of that name; give -o a "
                           "folder (or delete the file)")
    if not path.parent.is_dir():
        raise VLToolsError(f"{folder}: the folder {path.parent.resolve()} does not exist; create it first")
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:      # a read-only or full file system: one line naming the folder
        raise output_error(path, exc) from exc
    return str(path / f"part-{part.index:05d}-of-{part.count:05d}.{suffix}")


def is_part_set(path: str | os.PathLike) -> bool:
    """Whether `path` is a folder holding parts (complete or not)."""
    folder = Path(path)
    return folder.is_dir() and any(PART.fullmatch(entry.name) for entry in folder.iterdir())


def part_files(folder: str | os.PathLike) -> list[Path]:
    """The parts of the set in `folder`, in order, once every one is there: a missing part, one still being written
    (or interrupted: its `.partial/` folder is there), parts of two sets, or anything else in the folder is one line
    saying what to do."""
    folder = Path(folder)
    found: dict[int, Path] = {}
    counts, suffixes = set(), set()
    for entry in sorted(folder.iterdir()):
        match = PART.fullmatch(entry.name)
        if match is None:
            if PART.fullmatch(entry.name.removesuffix(".partial")) and entry.is_dir():
                raise VLToolsError(f"{folder}: part {entry.name.removesuffix('.partial')} was interrupted or is still "
                                   "being written (its .partial folder is there); resume it with --resume, or wait "
                                   "for it")
            if entry.name.endswith(".lock") or ".tmp-" in entry.name:
                continue     # a part being written: its lock and temporary (a missing part is reported below)
            raise VLToolsError(f"{folder}: holds {entry.name}, which is not a part (part-KKKKK-of-NNNNN.h5 or "
                               ".jsonl); move it away to read the folder as one set of parts")
        index, count = int(match.group(1)), int(match.group(2))
        counts.add(count)
        suffixes.add(match.group(3))
        found[index] = entry
    if not found:
        raise VLToolsError(f"{folder}: holds no parts (part-KKKKK-of-NNNNN files); give the folder a run wrote its "
                           "parts to")
    if len(counts) > 1 or len(suffixes) > 1:
        raise VLToolsError(f"{folder}: holds parts of different sets ({', '.join(sorted(map(str, counts)))} parts; "
                           f"{', '.join(sorted(suffixes))}); keep one run's parts in a folder")
    count = counts.pop()
    missing = [index for index in range(count) if index not in found]
    if missing or max(found) >= count:
        first = missing[0] if missing else max(found)
        raise VLToolsError(f"{folder}: part-{first:05d}-of-{count:05d} is missing ({len(found)} of {count} parts "
                           "are there); run it, or wait for it to finish")
    return [found[index] for index in range(count)]
