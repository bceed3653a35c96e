"""vltools.io.rows: rows of named arrays by id, every value checked as it is written."""

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.hdf5 import decode_strings, open_h5
from vltools.io.provenance import ids_digest
from vltools.io.rows import IDS_CHECKSUM, RowsWriter


def test_rows_of_any_name_are_written_in_the_dtype_asked_with_the_ids_checksum(tmp_path):
    path = tmp_path / "rows.h5"
    with RowsWriter(path, "chunk", {"model": "m"}, dtype="float16", dtypes={"exact": "float32"}) as writer:
        writer.add(["c1", "c2"], similarities=np.array([[1.5, 2.0], [3.0, 4.0]]), exact=np.ones((2, 3)),
                   counts=np.array([3, 4], dtype=np.int32))
        writer.add(["c3"], similarities=np.array([[5.0, 6.0]]), exact=np.zeros((1, 3)),
                   counts=np.array([5], dtype=np.int32))
    with open_h5(path) as handle:
        assert decode_strings(handle["ids"][:]) == ["c1", "c2", "c3"]
        assert handle.attrs[IDS_CHECKSUM] == ids_digest(["c1", "c2", "c3"]) and handle.attrs["model"] == "m"
        assert handle["similarities"].dtype == np.float16 and handle["exact"].dtype == np.float32
        assert handle["counts"].dtype == np.int32
        np.testing.assert_array_equal(handle["similarities"][2], [5.0, 6.0])


def test_a_non_finite_row_is_refused_naming_the_id_kind_and_the_fix_before_it_is_written(tmp_path):
    path = tmp_path / "rows.h5"
    with RowsWriter(path, "chunk", {}, name="out.jsonl", id_kind="caption id", fix="run in fp32") as writer:
        writer.add(["a"], similarities=np.ones((1, 2)))
        with pytest.raises(VLToolsError) as caught:
            writer.add(["b", "c"], similarities=np.array([[1.0, 2.0], [np.nan, 0.0]]))
        assert str(caught.value) == "out.jsonl: caption id 'c': the model gave NaN or infinite /similarities " \
                                    "values; run in fp32"
        with pytest.raises(VLToolsError, match=r"out.jsonl: caption id 'd': /similarities values exceed float16"):
            RowsWriter(tmp_path / "half.h5", "chunk", {}, "float16", "out.jsonl", "caption id").add(
                ["d"], similarities=np.array([[1e6, 0.0]]))
        with pytest.raises(VLToolsError, match="duplicate caption id 'a'"):
            writer.add(["a"], similarities=np.ones((1, 2)))
    with open_h5(path) as handle:
        assert decode_strings(handle["ids"][:]) == ["a"] and handle["similarities"].shape == (1, 2)
