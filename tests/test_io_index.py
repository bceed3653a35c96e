"""vltools.io.index: a saved index (bytes, ids, provenance) round-trips through one atomically written HDF5 file,
and a file that is not one, lacks a part, or disagrees with itself is refused on one line naming it."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.hdf5 import write_arrays
from vltools.io.index import read_index, write_index

ATTRS = {"metric": "ip", "factory": "Flat", "dims": 4, "side": "images", "checkpoint_digest": "d1", "model": "vse"}


def refused(path, match: str) -> str:
    with pytest.raises(VLToolsError, match=match) as caught:
        read_index(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_round_trip_of_bytes_ids_and_provenance(tmp_path):
    data = np.arange(3000, dtype=np.int64).astype(np.uint8)
    path = tmp_path / "g.index.h5"
    write_index(path, ["a", "b", "é/c"], data, ATTRS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.index.h5"]     # no temporary file or lock left
    saved = read_index(path)
    np.testing.assert_array_equal(saved.data, data)
    assert (saved.ids, saved.metric, saved.factory, saved.dims, saved.side, saved.checkpoint_digest) == \
        (["a", "b", "é/c"], "ip", "Flat", 4, "images", "d1")
    assert saved.attrs["count"] == 3 and saved.attrs["model"] == "vse"
    assert saved.attrs["format"] == "vltools.index"


def test_another_kind_of_file_is_refused(tmp_path):
    path = tmp_path / "emb.h5"
    write_arrays(path, "embeddings", {"ids": ["a"], "emb": np.ones((1, 2), np.float32)})
    refused(path, "expected a vltools index file, found embeddings")


def test_a_missing_dataset_or_attribute_and_a_wrong_count_are_refused(tmp_path):
    path = tmp_path / "g.h5"
    write_index(path, ["a", "b"], np.zeros(10, np.uint8), ATTRS)
    with h5py.File(path, "a") as handle:
        handle.attrs["count"] = 5
    assert "records 5 rows but holds 2 ids; rebuild it with vltools index" in refused(path, "records 5 rows")
    with h5py.File(path, "a") as handle:
        del handle.attrs["metric"]
    refused(path, "lacks the attribute 'metric'; rebuild it with vltools index")
    with h5py.File(path, "a") as handle:
        del handle["index"]
    refused(path, "lacks the /index dataset")


def test_a_truncated_file_is_one_line(tmp_path):
    path = tmp_path / "g.h5"
    write_index(path, ["a"], np.zeros(100_000, np.uint8), ATTRS)
    path.write_bytes(path.read_bytes()[:4000])
    refused(path, "not a readable HDF5 file")


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("dims", "32x", "'32x' (str), not an integer"), ("count", 2.5, "2.5 (float), not an integer"),
    ("metric", 3, "3 (int), not a string"), ("checkpoint_digest", [1, 2], "[1, 2] (list), not a string or None")])
def test_an_attribute_of_another_type_is_one_line_naming_it(tmp_path, name, value, shown):
    path = tmp_path / "g.h5"
    write_index(path, ["a", "b"], np.zeros(10, np.uint8), ATTRS)
    with h5py.File(path, "a") as handle:
        handle.attrs[name] = value
    refused(path, re.escape(f"attribute '{name}' is {shown}; rebuild it with vltools index") + "$")
