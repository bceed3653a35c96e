"""vltools.eval.self_retrieval against a brute-force loop, K capping, and its file checks."""

from __future__ import annotations

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.eval.self_retrieval import self_retrieval
from vltools.io.hdf5 import write_arrays
from vltools.io.logp import read_logp, write_logp


def brute_recall(logp: np.ndarray, own: list[int], k: int) -> float:
    hits = 0
    for t, image in enumerate(own):
        order = sorted(range(logp.shape[1]), key=lambda j: -logp[t, j])
        hits += image in order[:k]
    return 100.0 * hits / len(own)


def test_recalls_match_brute_force_with_distractor_images():
    rng = np.random.default_rng(0)
    n_captions, n_images = 80, 120  # 40 images have no generated caption: distractors
    own = rng.permutation(n_images)[:n_captions]
    logp = rng.normal(size=(n_captions, n_images)) - 30.0
    logp[np.arange(n_captions), own] += 1.5
    result = self_retrieval(logp, own, (1, 5, 50, 500))
    for k in (1, 5, 50):
        assert result[f"R@{k}"] == pytest.approx(brute_recall(logp, list(own), k))
    assert result["R@500"] == 100.0  # K capped at the 120 images
    assert (result["n_captions"], result["n_images"]) == (n_captions, n_images)
    assert 0 < result["R@1"] < result["R@50"] < 100


def test_logp_file_round_trip_and_checks(tmp_path):
    logp = np.array([[-1.0, -2.0, -3.0], [-5.0, -4.0, -0.5]])
    path = tmp_path / "logp.h5"
    write_logp(path, logp, ["a", "b", "c"], ["a", "b"])
    data = read_logp(path)
    np.testing.assert_array_equal(data.logp, logp)
    assert list(data.caption_index) == [0, 1]
    # caption 0 finds its image first; caption 1 ranks its own image b second (after c)
    assert self_retrieval(data.logp, data.caption_index, (1, 2)) == pytest.approx(
        {"R@1": 50.0, "R@2": 100.0, "medr": 1.0, "meanr": 1.5, "n_captions": 2, "n_images": 3})
    bad = tmp_path / "bad.h5"
    write_logp(bad, logp, ["a", "b", "c"], ["a", "zz"])
    with pytest.raises(VLToolsError, match="'zz'"):
        read_logp(bad)
    write_arrays(bad, "logp", {"logp": logp, "image_ids": ["a", "b", "c"]})
    with pytest.raises(VLToolsError, match="caption_image_ids"):
        read_logp(bad)
    write_arrays(bad, "logp", {"logp": logp, "image_ids": ["a", "b"], "caption_image_index": np.array([0, 1])})
    with pytest.raises(VLToolsError, match="does not match"):
        read_logp(bad)
