"""Embeddings files: streamed blocks written atomically and read back with their ids, side, model digest and
caption images; a non-finite row or a malformed file refused on one line naming the file (and the id); two
files compared only when one checkpoint wrote both."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.embeddings import check_same_model, open_embeddings, write_embeddings
from vltools.io.hdf5 import write_arrays


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    rows = rng.normal(size=(n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def refused(path, match: str) -> str:
    with pytest.raises(VLToolsError, match=match) as caught:
        open_embeddings(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_round_trip_of_blocks_ids_attrs_and_caption_images(tmp_path):
    rng = np.random.default_rng(0)
    emb = unit_rows(rng, 5, 3)
    ids = ["c0", "c1", "c2", "c3", "c4"]
    path = tmp_path / "caps.h5"
    blocks = (emb[s:s + 2] for s in range(0, 5, 2))      # a generator, as embed_blocks gives: 2 + 2 + 1 rows
    write_embeddings(path, ids, blocks, {"side": "captions", "model": "vse", "checkpoint_digest": "d1"},
                     caption_image_ids=["a", "a", "b", "b", "b"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caps.h5"]    # no temporary file or lock left
    loaded = open_embeddings(path)
    try:
        assert loaded.path == path
        assert loaded.ids == ids
        assert loaded.side == "captions"
        assert loaded.checkpoint_digest == "d1"
        assert loaded.caption_image_ids == ["a", "a", "b", "b", "b"]
        assert loaded.emb.dtype == np.float32
        np.testing.assert_array_equal(loaded.emb[()], emb)
        np.testing.assert_array_equal(loaded.emb[3], emb[3])       # read lazily, row by row
        assert loaded.handle.attrs["format"] == "vltools.embeddings"
        assert loaded.handle.attrs["model"] == "vse"
    finally:
        loaded.close()


def test_image_embeddings_have_no_caption_images_and_unicode_ids(tmp_path):
    emb = unit_rows(np.random.default_rng(1), 2, 4)
    path = tmp_path / "imgs.h5"
    write_embeddings(path, ["déjà/vu.jpg", "x y"], [emb], {"side": "images"})
    loaded = open_embeddings(path)
    try:
        assert loaded.ids == ["déjà/vu.jpg", "x y"]
        assert loaded.caption_image_ids is None
        assert loaded.checkpoint_digest is None
        np.testing.assert_array_equal(loaded.emb[()], emb)
    finally:
        loaded.close()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_row_is_refused_naming_its_id(tmp_path, bad):
    emb = unit_rows(np.random.default_rng(2), 4, 3)
    emb[2, 1] = bad
    path = tmp_path / "bad.h5"
    write_embeddings(path, ["i0", "i1", "i2", "i3"], [emb[:1], emb[1:]], {"side": "images"})
    message = refused(path, "id 'i2': /emb holds NaN or infinite values")
    assert "'i3'" not in message


def test_more_or_fewer_rows_than_ids_fails_and_leaves_no_file(tmp_path):
    emb = unit_rows(np.random.default_rng(3), 3, 2)
    with pytest.raises(ValueError, match="3 embeddings written for 4 ids"):
        write_embeddings(tmp_path / "short.h5", ["a", "b", "c", "d"], [emb], {})
    with pytest.raises((TypeError, ValueError)):    # h5py's broadcast error: a programming error either way
        write_embeddings(tmp_path / "long.h5", ["a", "b"], [emb], {})
    assert list(tmp_path.iterdir()) == []


def test_malformed_files_are_refused_naming_them(tmp_path):
    no_emb = tmp_path / "no_emb.h5"
    write_arrays(no_emb, "embeddings", {"ids": ["a", "b"]})
    refused(no_emb, "lacks the /emb dataset")
    no_ids = tmp_path / "no_ids.h5"
    write_arrays(no_ids, "embeddings", {"emb": np.zeros((2, 3), dtype=np.float32)})
    refused(no_ids, "lacks the /ids dataset")
    other_kind = tmp_path / "sims.h5"
    write_arrays(other_kind, "sims", {"ids": ["a"], "emb": np.zeros((1, 2), dtype=np.float32)})
    refused(other_kind, "expected a vltools embeddings file, found sims")
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as handle:
        handle["emb"] = np.zeros((1, 2))
    refused(plain, "not a vltools file")


def test_emb_with_more_rows_than_ids_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "mismatch.h5"
    write_arrays(path, "embeddings", {"ids": ["a", "b"], "emb": np.zeros((3, 4), dtype=np.float32)})
    refused(path, r"/emb has shape \(3, 4\) for 2 ids")


def test_one_dimensional_emb_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "flat.h5"
    write_arrays(path, "embeddings", {"ids": ["a", "b"], "emb": np.zeros(2, dtype=np.float32)})
    refused(path, r"/emb has shape \(2,\) for 2 ids")


def _opened(path, digest: str | None, dim: int, side: str):
    attrs = {"side": side} if digest is None else {"side": side, "checkpoint_digest": digest}
    write_embeddings(path, ["x", "y"], [np.eye(2, dim, dtype=np.float32)], attrs)
    return open_embeddings(path)


def test_check_same_model_accepts_one_checkpoint_and_dimension(tmp_path):
    images, captions = _opened(tmp_path / "i.h5", "abc", 3, "images"), _opened(tmp_path / "c.h5", "abc", 3, "captions")
    try:
        check_same_model(images, captions)
    finally:
        images.close()
        captions.close()


def test_check_same_model_refuses_another_checkpoint_or_dimension(tmp_path):
    images = _opened(tmp_path / "i.h5", "abc", 3, "images")
    other = _opened(tmp_path / "other.h5", "xyz", 3, "captions")
    wider = _opened(tmp_path / "wider.h5", "abc", 5, "captions")
    unknown = _opened(tmp_path / "unknown.h5", None, 3, "captions")
    try:
        with pytest.raises(VLToolsError) as caught:
            check_same_model(images, other)
        message = str(caught.value)
        assert message.startswith(f"{tmp_path / 'other.h5'}: encoded by another checkpoint than {tmp_path / 'i.h5'}")
        assert "(xyz vs abc)" in message
        with pytest.raises(VLToolsError, match=r"wider\.h5: 5-d embeddings vs 3-d in .*i\.h5$"):
            check_same_model(images, wider)
        with pytest.raises(VLToolsError, match="another checkpoint"):
            check_same_model(images, unknown)
    finally:
        for opened in (images, other, wider, unknown):
            opened.close()
