"""A set's parts read as one file: rows across parts by any selection, the parts' places checked, ids once."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.part_sets import PartsDataset, PartsHandle, check_spans, unique_ids


@pytest.fixture
def rows(tmp_path):
    """Rows 0..9 of a 10 x 3 array kept in three HDF5 parts of 4, 0 and 6 rows (checksummed as vltools writes)."""
    whole = np.arange(30, dtype=np.float32).reshape(10, 3)
    handles = []
    for number, (start, stop) in enumerate([(0, 4), (4, 4), (4, 10)]):
        handle = h5py.File(tmp_path / f"part{number}.h5", "w")
        handle.create_dataset("x", data=whole[start:stop], maxshape=(None, 3), chunks=(1, 3), fletcher32=True)
        handles.append(handle)
    yield whole, PartsDataset([handle["x"] for handle in handles])
    for handle in handles:
        handle.close()


def test_rows_are_read_across_parts_by_row_slice_array_or_all(rows):
    whole, parts = rows
    assert parts.shape == (10, 3) and len(parts) == 10 and parts.dtype == np.float32 and parts.ndim == 2
    assert np.array_equal(parts[()], whole)
    assert np.array_equal(parts[3:7], whole[3:7])
    assert np.array_equal(parts[5], whole[5])
    picked = np.array([9, 0, 4, 4, 3])
    assert np.array_equal(parts[picked], whole[picked])
    assert parts[np.array([], dtype=np.int64)].shape == (0, 3)


def test_a_handle_keeps_the_first_parts_attributes_but_its_place_and_closes_every_part():
    closed = []
    handle = PartsHandle(Path("set"), {"model": "vse", "part": "0/2", "span": "0:4/10", "ids_checksum": "x"}, {},
                         [lambda: closed.append(1), lambda: closed.append(2)], own=("ids_checksum",))
    assert handle.attrs == {"model": "vse"} and str(handle) == "set" and "emb" not in handle
    handle.close()
    assert closed == [1, 2]


def places(*spans):
    return [(Path(f"part{k}"), {"part": f"{k}/{len(spans)}", "span": span}) for k, span in enumerate(spans)]


def test_the_parts_must_cover_every_input_once_in_order():
    check_spans(Path("set"), places("0:4/10", "4:4/10", "4:10/10"))
    with pytest.raises(VLToolsError, match=r"^part1: holds inputs 6:10 of 10, but the parts before it end at input 4 "
                                           r"of 10; the parts come from runs with other inputs or batch sizes"):
        check_spans(Path("set"), places("0:4/10", "6:10/10"))
    with pytest.raises(VLToolsError, match=r"^set: its parts hold inputs 0:8 of 10; rerun the run that wrote them"):
        check_spans(Path("set"), places("0:4/10", "4:8/10"))
    with pytest.raises(VLToolsError, match=r"^part1: records no place in a set of 2 parts"):
        check_spans(Path("set"), [places("0:4/10", "4:10/10")[0], (Path("part1"), {})])


def test_an_id_in_two_parts_is_named_with_both():
    assert unique_ids([(Path("a"), ["x", "y"]), (Path("b"), ["z"])], "image id") == ["x", "y", "z"]
    with pytest.raises(VLToolsError, match=r"^b: image id 'y' is also in a; the parts of a set hold each once$"):
        unique_ids([(Path("a"), ["x", "y"]), (Path("b"), ["y"])], "image id")
