import h5py
import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.hdf5 import decode_strings, file_kind, is_hdf5, open_h5, write_arrays


def test_write_arrays_records_kind_provenance_and_strings(tmp_path):
    path = tmp_path / "e.h5"
    write_arrays(path, "embeddings", {"ids": ["é1", "b"], "emb": np.eye(2, dtype=np.float32)}, {"model": "vse"})
    with open_h5(path, "embeddings") as handle:
        assert file_kind(handle) == "embeddings"
        assert decode_strings(handle["ids"][:]) == ["é1", "b"]
        np.testing.assert_array_equal(handle["emb"][:], np.eye(2))
        assert handle.attrs["model"] == "vse"
        assert "command" in handle.attrs


def test_truncated_file_is_reported(tmp_path):
    path = tmp_path / "e.h5"
    write_arrays(path, "embeddings", {"ids": ["a"], "emb": np.zeros((1, 4))})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(VLToolsError, match="truncated"):
        open_h5(path)


def test_plain_hdf5_without_format_is_not_a_vltools_file(tmp_path):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as handle:
        handle["x"] = np.zeros(3)
    with pytest.raises(VLToolsError, match="not a vltools file"):
        open_h5(path, "sims")
    with pytest.raises(VLToolsError, match="no such file"):
        open_h5(tmp_path / "absent.h5")


def test_is_hdf5_tells_hdf5_from_text(tmp_path):
    write_arrays(tmp_path / "e.h5", "embeddings", {"ids": ["a"], "emb": np.zeros((1, 2))})
    (tmp_path / "r.jsonl").write_text('{"query": "a"}\n')
    assert is_hdf5(tmp_path / "e.h5") and not is_hdf5(tmp_path / "r.jsonl") and not is_hdf5("-")
    with pytest.raises(VLToolsError, match="no such file"):
        is_hdf5(tmp_path / "absent.h5")
