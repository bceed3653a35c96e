"""A set of parts (vltools.io.shards) read as one HDF5 file: its datasets the rows of every part in order, its
attributes the first part's but its place in the set. The features and embeddings readers open a folder of parts
through here, after checking each part as they check a file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from vltools.errors import VLToolsError
from vltools.io.hdf5 import read

PLACE_ATTRS = ("part", "span")    # what a part records of its place in its set (vltools.io.shards.Part.attrs)


class PartsDataset:
    """One dataset of a set's parts read as one file's: the rows of every part, in order. Each part's rows are read
    through `read` (checksums verified, a failure naming the part's file)."""

    def __init__(self, datasets: Sequence[object]) -> None:
        self.datasets = list(datasets)
        self.starts = np.cumsum([0] + [dataset.shape[0] for dataset in self.datasets])
        self.shape = (int(self.starts[-1]), *self.datasets[0].shape[1:])
        self.dtype = self.datasets[0].dtype
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, selection: object) -> np.ndarray:
        """Rows `selection` (a row, a slice, an array of rows in any order, or () for all) of the parts together."""
        if isinstance(selection, int | np.integer):
            number = int(np.searchsorted(self.starts, int(selection), side="right")) - 1
            return read(self.datasets[number], int(selection) - int(self.starts[number]))
        whole = isinstance(selection, tuple) and not selection
        rows = np.arange(self.shape[0])[slice(None) if whole else selection]
        out = np.empty((len(rows), *self.shape[1:]), dtype=self.dtype)
        for number, dataset in enumerate(self.datasets):
            start, stop = int(self.starts[number]), int(self.starts[number + 1])
            where = np.flatnonzero((rows >= start) & (rows < stop))
            if len(where):
                wanted, back = np.unique(rows[where] - start, return_inverse=True)
                contiguous = wanted[-1] - wanted[0] + 1 == len(wanted)
                block = read(dataset, slice(int(wanted[0]), int(wanted[-1]) + 1) if contiguous else wanted)
                out[where] = block[back]
        return out


class PartsHandle:
    """The datasets and attributes of a set's parts as one open file's: `attrs` are the first part's but its place
    in the set and what its writer records of its own rows (`own`: checksums, counts); closing it closes the
    parts (`close` of each)."""

    def __init__(self, folder: Path, attrs: Mapping[str, object], datasets: Mapping[str, PartsDataset],
                 closers: Iterable[Callable[[], None]], own: Iterable[str] = ()) -> None:
        self.name = str(folder)
        skipped = set(PLACE_ATTRS) | set(own)
        self.attrs = {key: value for key, value in attrs.items() if key not in skipped}
        self.datasets = dict(datasets)
        self.closers = list(closers)

    def __contains__(self, name: object) -> bool:
        return name in self.datasets

    def __getitem__(self, name: str) -> PartsDataset:
        return self.datasets[name]

    def __str__(self) -> str:
        return self.name

    def close(self) -> None:
        for close in self.closers:
            close()


def check_spans(folder: Path, parts: Sequence[tuple[Path, Mapping[str, object]]]) -> None:
    """The parts (path, attributes) of the set in `folder` must each record their place (`part` "k/K" and `span`
    "start:stop/total", written with them) and together cover inputs 0..total once, in order: parts of runs with
    other inputs or batch sizes would lose or repeat items."""
    stop, total = 0, None
    for number, (path, attrs) in enumerate(parts):
        found = re.fullmatch(r"(\d+):(\d+)/(\d+)", str(attrs.get("span", "")))
        if found is None or str(attrs.get("part")) != f"{number}/{len(parts)}":
            raise VLToolsError(f"{path}: records no place in a set of {len(parts)} parts (attributes 'part' and "
                               f"'span'); keep in {folder} only the parts one run wrote there")
        first, last, count = map(int, found.groups())
        if first != stop or (total is not None and count != total):
            raise VLToolsError(f"{path}: holds inputs {first}:{last} of {count}, but the parts before it end at "
                               f"input {stop}" + (f" of {total}" if total is not None else "") + "; the parts come "
                               "from runs with other inputs or batch sizes: rerun them with the same ones")
        stop, total = last, count
    if stop != total:
        raise VLToolsError(f"{folder}: its parts hold inputs 0:{stop} of {total}; rerun the run that wrote them")


def unique_ids(parts: Sequence[tuple[Path, Sequence[str]]], what: str) -> list[str]:
    """The ids of the parts (path, ids) in order, none in two parts (one line naming both otherwise)."""
    seen: dict[str, Path] = {}
    for path, ids in parts:
        for item in ids:
            if item in seen:
                raise VLToolsError(f"{path}: {what} {item!r} is also in {seen[item]}; the parts of a set hold each "
                                   "once")
            seen[item] = path
    return list(seen)
