"""vltools.infer.index: the training sample, the check of a loaded index against its provenance, the mapping of
indexed rows onto the items searched, and the error without faiss."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from index_helpers import save, unit

from vltools.errors import VLToolsError
from vltools.infer.index import build_index, check_model, check_source, load_index, positions, remap, training_rows

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


def test_a_side_without_a_checkpoint_digest_is_refused_and_two_without_are_warned_about(tmp_path, caplog):
    """Whether one model encoded the index and the queries can be checked only when both record a digest: one
    missing is refused (it was searched without a word), both missing are searched with a warning."""
    save(tmp_path / "e.h5", "i", unit(np.random.default_rng(0).normal(size=(5, 4))), "images")
    build_index(tmp_path / "e.h5", tmp_path / "g.h5")
    build_index(tmp_path / "e.h5", tmp_path / "bare.h5")
    with h5py.File(tmp_path / "bare.h5", "a") as handle:
        del handle.attrs["checkpoint_digest"]
    indexed, bare = load_index(tmp_path / "g.h5"), load_index(tmp_path / "bare.h5")
    check_model(indexed, "d1", "q.h5")
    with pytest.raises(VLToolsError, match=r"bare.h5: records no checkpoint digest, so whether --first-stage vse.pt "
                                           r"was encoded by the model of its embeddings cannot be checked; rebuild"):
        check_model(bare, "d1", "--first-stage vse.pt")
    with pytest.raises(VLToolsError, match=r"^q.h5: records no checkpoint digest, so whether the model of the "
                                           r"embeddings indexed in .*g.h5 encoded it cannot be checked; encode it"):
        check_model(indexed, None, "q.h5")
    caplog.clear()
    check_model(bare, None, "q.h5")
    assert "q.h5: neither it nor " in caplog.text and "records the checkpoint that encoded it" in caplog.text


def test_an_index_of_embeddings_encoded_from_another_file_is_warned_about(tmp_path, caplog):
    save(tmp_path / "e.h5", "i", unit(np.random.default_rng(0).normal(size=(5, 4))), "images")
    with h5py.File(tmp_path / "e.h5", "a") as handle:
        handle.attrs["source"] = str(tmp_path / "feats.h5")
    build_index(tmp_path / "e.h5", tmp_path / "g.h5")
    saved = load_index(tmp_path / "g.h5")
    (tmp_path / "feats.h5").write_bytes(b"features")
    (tmp_path / "other.h5").write_bytes(b"features")
    caplog.clear()
    check_source(saved, tmp_path / "feats.h5", "features")
    assert caplog.text == ""
    check_source(saved, tmp_path / "other.h5", "features")
    assert (f"g.h5: its embeddings were encoded from {tmp_path / 'feats.h5'}, not from the features "
            f"{tmp_path / 'other.h5'} matched here; if those are other features, its candidates are wrong"
            ) in caplog.text
