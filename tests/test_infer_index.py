"""vltools.infer.index: the training sample, the check of a loaded index against its provenance, the mapping of
indexed rows onto the items searched, and the error without faiss."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from index_helpers import save, unit

from vltools.errors import VLToolsError
from vltools.infer.index import build_index, load_index, positions, remap, training_rows

faiss = pytest.importorskip("faiss")


def test_the_training_sample_is_rows_of_the_file_chosen_by_the_seed(tmp_path):
    rows = np.arange(200 * 3, dtype=np.float32).reshape(200, 3)
    with h5py.File(tmp_path / "e.h5", "w") as handle:
        handle["emb"] = rows
    with h5py.File(tmp_path / "e.h5") as handle:
        first, again, other = (training_rows(handle["emb"], 50, seed) for seed in (0, 0, 1))
        assert training_rows(handle["emb"], 200, 0) is None
    assert first.shape == (50, 3)
    numbers = first[:, 0] / 3
    assert len(set(numbers)) == 50 and all(np.equal(np.mod(numbers, 1), 0))    # whole, distinct rows of the file
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


def test_an_index_disagreeing_with_its_provenance_is_refused(tmp_path):
    save(tmp_path / "e.h5", "i", unit(np.random.default_rng(0).normal(size=(20, 4))), "images")
    build_index(tmp_path / "e.h5", tmp_path / "g.h5", metric="l2")
    with h5py.File(tmp_path / "g.h5", "a") as handle:
        handle.attrs["metric"] = "ip"
    with pytest.raises(VLToolsError, match=r"g.h5: the index's metric is l2 but its provenance says ip; rebuild"):
        load_index(tmp_path / "g.h5")


def test_garbage_bytes_are_not_a_faiss_index(tmp_path):
    save(tmp_path / "e.h5", "i", unit(np.random.default_rng(0).normal(size=(20, 4))), "images")
    build_index(tmp_path / "e.h5", tmp_path / "g.h5")
    with h5py.File(tmp_path / "g.h5", "a") as handle:
        size = len(handle["index"])
        handle["index"][:] = np.zeros(size, np.uint8)
    with pytest.raises(VLToolsError, match=r"g.h5: /index is not a readable FAISS index \(") as caught:
        load_index(tmp_path / "g.h5")
    assert "\n" not in str(caught.value)


def test_indexed_rows_map_onto_the_items_searched_and_every_item_must_be_indexed(tmp_path):
    save(tmp_path / "e.h5", "c", unit(np.random.default_rng(0).normal(size=(5, 4))), "captions")
    build_index(tmp_path / "e.h5", tmp_path / "g.h5")
    saved = load_index(tmp_path / "g.h5")
    found = positions(saved, ["c3", "c0", "c4"], "captions")
    np.testing.assert_array_equal(found, [1, -1, -1, 0, 2])
    np.testing.assert_array_equal(remap(np.array([[3, 1, -1], [4, 0, 2]]), found), [[0, -1, -1], [2, 1, -1]])
    with pytest.raises(VLToolsError, match=r"g.h5: lacks 1 of the 2 captions to search \('x'\); build it over"):
        positions(saved, ["c1", "x"], "captions")


def test_without_faiss_the_stage_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setattr("vltools.infer.topk.faiss_available", lambda: False)
    with pytest.raises(VLToolsError, match=r"^vltools index needs faiss, which is not installed; install the extra "
                                           r"\(pip install 'vltools\[faiss\]'\)$"):
        build_index(tmp_path / "e.h5", tmp_path / "g.h5")
