"""Similarity matrices on disk: the sims HDF5 round trip and its checks, SCAN's `.npy` matrix in the precomp
layout, the ensemble mean, and each caption's image row; every refusal one line naming the file."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.hdf5 import write_arrays
from vltools.io.sims import (
    Sims,
    average_sims,
    caption_image_index,
    merge_parts,
    read_npy_sims,
    read_sims,
    write_sims,
)

IMAGES = ["i0", "i1"]
CAPTIONS = ["c0", "c1", "c2"]
CAPTION_IMAGES = ["i1", "i0", "i1"]


def one_line(call, match: str, source) -> str:
    with pytest.raises(VLToolsError, match=match) as caught:
        call()
    message = str(caught.value)
    assert message.startswith(f"{source}: ") and "\n" not in message
    return message


def test_round_trip_with_ids_caption_images_and_attrs(tmp_path):
    sims = np.array([[0.5, -1.0, 2.25], [3.0, 0.0, -0.125]], dtype=np.float32)
    path = tmp_path / "sims.h5"
    write_sims(path, sims, IMAGES, CAPTIONS, CAPTION_IMAGES, {"model": "sgr"})
    loaded = read_sims(path)
    assert isinstance(loaded, Sims)
    assert loaded.sims.dtype == np.float32
    np.testing.assert_array_equal(loaded.sims, sims)
    assert (loaded.image_ids, loaded.caption_ids, loaded.caption_image_ids) == (IMAGES, CAPTIONS, CAPTION_IMAGES)
    with h5py.File(path, "r") as handle:
        assert handle.attrs["format"] == "vltools.sims" and handle.attrs["model"] == "sgr"
    write_sims(path, sims.astype(np.float64), IMAGES, CAPTIONS)
    loaded = read_sims(path)
    assert loaded.caption_image_ids is None and loaded.sims.dtype == np.float64


def test_write_refuses_shapes_that_do_not_fit_the_ids(tmp_path):
    with pytest.raises(ValueError, match=r"sims shape \(3, 2\) != \(2 image ids, 3 caption ids\)"):
        write_sims(tmp_path / "s.h5", np.zeros((3, 2)), IMAGES, CAPTIONS)
    with pytest.raises(ValueError, match="one entry per caption"):
        write_sims(tmp_path / "s.h5", np.zeros((2, 3)), IMAGES, CAPTIONS, ["i0", "i1"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("image_ids,caption_ids,where,dup", [
    (["i0", "i0"], CAPTIONS, "/image_ids", "'i0'"),
    (IMAGES, ["c0", "c1", "c1"], "/caption_ids", "'c1'"),
])
def test_duplicate_ids_are_refused(tmp_path, image_ids, caption_ids, where, dup):
    path = tmp_path / "dup.h5"
    write_sims(path, np.zeros((2, 3)), image_ids, caption_ids)
    one_line(lambda: read_sims(path), f"{where}: duplicate id {dup}; ids must be unique", path)


def test_malformed_sims_files_are_refused_naming_them(tmp_path):
    path = tmp_path / "bad.h5"
    write_arrays(path, "sims", {"sims": np.zeros((2, 3)), "image_ids": IMAGES})
    one_line(lambda: read_sims(path), "lacks the /caption_ids dataset", path)
    write_arrays(path, "sims", {"sims": np.zeros((3, 2)), "image_ids": IMAGES, "caption_ids": CAPTIONS})
    one_line(lambda: read_sims(path), r"/sims: shape \(3, 2\) does not match 2 image ids x 3 caption ids", path)
    inf = np.zeros((2, 3))
    inf[1, 2] = -np.inf
    write_arrays(path, "sims", {"sims": inf, "image_ids": IMAGES, "caption_ids": CAPTIONS})
    one_line(lambda: read_sims(path), "/sims: contains NaN or infinite scores", path)
    write_arrays(path, "sims", {"sims": np.zeros((2, 3)), "image_ids": IMAGES, "caption_ids": CAPTIONS,
                                "caption_image_ids": ["i0"]})
    one_line(lambda: read_sims(path), "/caption_image_ids: 1 entries for 3 captions", path)
    write_arrays(path, "logp", {"sims": np.zeros((2, 3)), "image_ids": IMAGES, "caption_ids": CAPTIONS})
    one_line(lambda: read_sims(path), "expected a vltools sims file, found logp", path)


def test_npy_in_the_precomp_layout_gets_scan_ids(tmp_path):
    matrix = np.arange(45, dtype=np.float32).reshape(3, 15)
    np.save(tmp_path / "m.npy", matrix)
    sims = read_npy_sims(tmp_path / "m.npy", prefix="test_")
    np.testing.assert_array_equal(sims.sims, matrix)
    assert sims.sims.dtype == np.float32
    assert sims.image_ids == ["test_0", "test_1", "test_2"]
    assert sims.caption_ids == [f"test_{i}#{k}" for i in range(3) for k in range(5)]
    assert sims.caption_image_ids == ["test_0"] * 5 + ["test_1"] * 5 + ["test_2"] * 5
    assert read_npy_sims(tmp_path / "m.npy").caption_ids[5:7] == ["1#0", "1#1"]


def test_npy_with_ids_from_a_captions_file_and_its_dtypes(tmp_path):
    np.save(tmp_path / "m.npy", np.arange(6, dtype=np.int64).reshape(2, 3))
    sims = read_npy_sims(tmp_path / "m.npy", IMAGES, CAPTIONS, CAPTION_IMAGES)
    assert (sims.image_ids, sims.caption_ids, sims.caption_image_ids) == (IMAGES, CAPTIONS, CAPTION_IMAGES)
    assert sims.sims.dtype == np.float32 and sims.sims.tolist() == [[0, 1, 2], [3, 4, 5]]
    np.save(tmp_path / "d.npy", np.full((2, 3), 1 / 3))
    assert read_npy_sims(tmp_path / "d.npy", IMAGES, CAPTIONS).sims.dtype == np.float64


def test_npy_matrices_that_do_not_fit_are_refused_naming_the_file(tmp_path):
    path = tmp_path / "m.npy"
    np.save(path, np.zeros((10, 2)))
    message = one_line(lambda: read_npy_sims(path), "shape 10 x 2 is not the precomp layout", path)
    assert "looks transposed" in message
    np.save(path, np.zeros((2, 7)))
    message = one_line(lambda: read_npy_sims(path), "shape 2 x 7 is not the precomp layout", path)
    assert "transposed" not in message
    one_line(lambda: read_npy_sims(path, IMAGES, CAPTIONS), "shape 2 x 7 does not fit the 2 images x 3 captions",
             path)
    np.save(path, np.zeros(10))
    one_line(lambda: read_npy_sims(path), "expected a 2-D numeric images x captions matrix", path)
    nan = np.zeros((1, 5))
    nan[0, 3] = np.nan
    np.save(path, nan)
    one_line(lambda: read_npy_sims(path), "contains NaN or infinite scores", path)
    (tmp_path / "text.npy").write_text("not numpy")
    one_line(lambda: read_npy_sims(tmp_path / "text.npy"), "not a readable .npy array", tmp_path / "text.npy")


def test_average_sims_is_the_float64_mean_of_the_parts():
    rng = np.random.default_rng(0)
    parts = [rng.normal(size=(2, 3)).astype(np.float32) for _ in range(3)]
    mean = average_sims([(f"m{n}.h5", Sims(p, IMAGES, CAPTIONS, CAPTION_IMAGES)) for n, p in enumerate(parts)])
    assert mean.sims.dtype == np.float64
    expected = (parts[0].astype(np.float64) + parts[1].astype(np.float64) + parts[2].astype(np.float64)) / 3
    np.testing.assert_allclose(mean.sims, expected, rtol=1e-12)
    assert (mean.image_ids, mean.caption_ids, mean.caption_image_ids) == (IMAGES, CAPTIONS, CAPTION_IMAGES)
    alone = average_sims([("one.h5", Sims(parts[0], IMAGES, CAPTIONS, None))])
    np.testing.assert_array_equal(alone.sims, parts[0].astype(np.float64))


@pytest.mark.parametrize("other,where,what", [
    (Sims(np.zeros((2, 3)), ["i1", "i0"], CAPTIONS, CAPTION_IMAGES), "/image_ids", "the same ids in another order"),
    (Sims(np.zeros((2, 3)), IMAGES, ["c0", "c1", "c9"], CAPTION_IMAGES), "/caption_ids", "other ids"),
    (Sims(np.zeros((2, 3)), IMAGES, CAPTIONS, ["i0", "i0", "i1"]), "/caption_image_ids", "other ids"),
    (Sims(np.zeros((2, 3)), IMAGES, CAPTIONS, None), "/caption_image_ids", "other ids"),
])
def test_average_sims_refuses_parts_with_other_ids_naming_the_part(other, where, what):
    first = Sims(np.ones((2, 3)), IMAGES, CAPTIONS, CAPTION_IMAGES)
    parts = [("first.h5", first), ("same.h5", first), ("odd.h5", other)]
    message = one_line(lambda: average_sims(parts), f"{where}: has {what} than first.h5", "odd.h5")
    assert message.endswith("in the same order")


def test_caption_image_index_gives_each_captions_image_row():
    index = caption_image_index(["a", "b", "c"], ["c", "a", "a", "b", "c"], "caps.jsonl")
    assert index.dtype == np.int64 and index.tolist() == [2, 0, 0, 1, 2]


def test_caption_image_index_refuses_unknown_images_listing_them_once():
    unknown = [f"x{n}" for n in range(7)]
    message = one_line(lambda: caption_image_index(["a"], ["a", *unknown, "x0"], "sims.h5"),
                       "/caption_image_ids: 7 captions' images are not in /image_ids", "sims.h5")
    assert "'x0', 'x1', 'x2', 'x3', 'x4' and 2 more" in message


def test_an_uncaptioned_image_is_refused_unless_allowed():
    images, caption_images = ["a", "b", "c", "d"], ["c", "a", "c"]
    message = one_line(lambda: caption_image_index(images, caption_images, "sims.h5"),
                       "/image_ids: 2 images have no caption: 'b', 'd'", "sims.h5")
    assert message.endswith("every image needs at least one caption to be scored")
    index = caption_image_index(images, caption_images, "sims.h5", every_image_captioned=False)
    assert index.tolist() == [2, 0, 2]


def test_a_folder_of_parts_is_the_matrix_their_columns_make_and_merges_into_its_file(tmp_path):
    sims = np.array([[0.5, -1.0, 2.25], [3.0, 0.0, -0.125]], dtype=np.float32)
    (tmp_path / "set").mkdir()
    for part, (start, stop) in enumerate([(0, 2), (2, 3)]):
        write_sims(tmp_path / "set" / f"part-0000{part}-of-00002.h5", sims[:, start:stop], IMAGES,
                   CAPTIONS[start:stop], CAPTION_IMAGES[start:stop],
                   {"model": "sgr", "part": f"{part}/2", "span": f"{start}:{stop}/3"})
    joined = read_sims(tmp_path / "set")
    assert np.array_equal(joined.sims, sims) and joined.caption_ids == CAPTIONS
    assert joined.caption_image_ids == CAPTION_IMAGES and joined.image_ids == IMAGES
    assert merge_parts(tmp_path / "set", tmp_path / "one.h5") == 3
    with h5py.File(tmp_path / "one.h5") as handle:
        assert "part" not in handle.attrs and handle.attrs["model"] == "sgr"
    assert np.array_equal(read_sims(tmp_path / "one.h5").sims, sims)
    write_sims(tmp_path / "set" / "part-00001-of-00002.h5", sims[::-1, 2:], IMAGES[::-1], CAPTIONS[2:],
               CAPTION_IMAGES[2:], {"model": "sgr", "part": "1/2", "span": "2:3/3"})
    one_line(lambda: read_sims(tmp_path / "set"), "/image_ids: has other images than .*part-00000-of-00002.h5",
             tmp_path / "set" / "part-00001-of-00002.h5")
