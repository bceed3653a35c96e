"""Caption log-probability files: written and read back with ids, each generated caption's image found by id
(uncaptioned images kept as distractors), and malformed files refused on one line naming the file."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.hdf5 import write_arrays
from vltools.io.logp import LogP, read_logp, write_logp

IMAGES = ["a", "b", "c", "d"]
CAPTION_IMAGES = ["c", "a", "c"]           # image "b" and "d" have no generated caption: distractors


def logp_matrix() -> np.ndarray:
    return -np.arange(1, 13, dtype=np.float64).reshape(3, 4) / 4


def refused(path, match: str) -> str:
    with pytest.raises(VLToolsError, match=match) as caught:
        read_logp(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_round_trip_with_caption_ids_attrs_and_distractor_images(tmp_path):
    path = tmp_path / "logp.h5"
    write_logp(path, logp_matrix(), IMAGES, CAPTION_IMAGES, caption_ids=["g0", "g1", "g2"],
               attrs={"model": "neuraltalk2"})
    data = read_logp(path)
    assert isinstance(data, LogP)
    np.testing.assert_array_equal(data.logp, logp_matrix())
    assert data.image_ids == IMAGES
    assert data.caption_index.tolist() == [2, 0, 2]       # rows of c, a, c in IMAGES
    assert data.caption_index.dtype == np.int64
    with h5py.File(path, "r") as handle:
        assert handle.attrs["format"] == "vltools.logp"
        assert handle.attrs["model"] == "neuraltalk2"
        assert [v.decode() for v in handle["caption_ids"][()]] == ["g0", "g1", "g2"]


def test_minus_infinity_is_a_valid_log_probability(tmp_path):
    logp = logp_matrix()
    logp[1, 3] = -np.inf
    write_logp(tmp_path / "logp.h5", logp, IMAGES, CAPTION_IMAGES)
    assert read_logp(tmp_path / "logp.h5").logp[1, 3] == -np.inf


def test_caption_images_not_among_the_images_are_refused_naming_them(tmp_path):
    path = tmp_path / "logp.h5"
    write_logp(path, np.zeros((4, 4)), IMAGES, ["a", "zz", "yy", "zz"])
    message = refused(path, "/caption_image_ids: 2 captions' images are not in /image_ids")
    assert "'zz', 'yy'" in message


def test_write_refuses_a_matrix_not_fitting_the_ids(tmp_path):
    with pytest.raises(ValueError, match=r"logp shape \(4, 3\) != \(3 captions, 4 images\)"):
        write_logp(tmp_path / "logp.h5", logp_matrix().T, IMAGES, CAPTION_IMAGES)
    assert not (tmp_path / "logp.h5").exists()


def test_caption_image_index_dataset_is_accepted_and_range_checked(tmp_path):
    path = tmp_path / "index.h5"
    write_arrays(path, "logp", {"logp": logp_matrix(), "image_ids": IMAGES,
                                "caption_image_index": np.array([3, 3, 0])})
    assert read_logp(path).caption_index.tolist() == [3, 3, 0]
    for bad in ([0, 4, 1], [0, -1, 1]):
        write_arrays(path, "logp", {"logp": logp_matrix(), "image_ids": IMAGES, "caption_image_index": np.array(bad)})
        refused(path, "/caption_image_index: values must be image rows 0..3")


def test_malformed_files_are_refused_naming_them(tmp_path):
    path = tmp_path / "bad.h5"
    write_arrays(path, "logp", {"image_ids": IMAGES, "caption_image_ids": CAPTION_IMAGES})
    refused(path, "no /logp dataset")
    write_arrays(path, "logp", {"logp": logp_matrix(), "caption_image_ids": CAPTION_IMAGES})
    refused(path, "no /image_ids dataset")
    write_arrays(path, "logp", {"logp": logp_matrix(), "image_ids": IMAGES})
    refused(path, "no /caption_image_ids")
    write_arrays(path, "logp", {"logp": logp_matrix()[:2], "image_ids": IMAGES, "caption_image_ids": CAPTION_IMAGES})
    refused(path, r"/logp: shape \(2, 4\) does not match 3 captions x 4 images")
    nan = logp_matrix()
    nan[0, 0] = np.nan
    write_arrays(path, "logp", {"logp": nan, "image_ids": IMAGES, "caption_image_ids": CAPTION_IMAGES})
    refused(path, "/logp: contains NaN")
