"""vltools.eval.retrieval against brute-force loops, a hand-checked example, and its file checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.eval.retrieval import fold_metrics, rankings_ranks, retrieval_metrics, summarize
from vltools.io.hdf5 import write_arrays
from vltools.io.sims import Sims, average_sims, caption_image_index, read_npy_sims, read_sims, write_sims


def brute_force(sims: np.ndarray, image_of: list[int]) -> dict:
    """Sort every query's list with Python and read off the ranks; summarise as SCAN's evalrank does."""
    n_images, n_captions = sims.shape
    i2t = []
    for i in range(n_images):
        order = sorted(range(n_captions), key=lambda j: -sims[i, j])
        i2t.append(min(pos for pos, j in enumerate(order) if image_of[j] == i))
    t2i = []
    for j in range(n_captions):
        order = sorted(range(n_images), key=lambda i: -sims[i, j])
        t2i.append(order.index(image_of[j]))

    def summary(ranks: list[int]) -> dict:
        ordered = sorted(ranks)
        n = len(ordered)
        median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
        out = {f"R@{k}": 100.0 * sum(r < k for r in ranks) / n for k in (1, 5, 10)}
        return {**out, "medr": math.floor(median) + 1, "meanr": sum(ranks) / n + 1}

    a, b = summary(i2t), summary(t2i)
    return {"i2t": a, "t2i": b, "rsum": sum(a[f"R@{k}"] + b[f"R@{k}"] for k in (1, 5, 10))}


def assert_same(result: dict, expected: dict) -> None:
    for direction in ("i2t", "t2i"):
        for key, value in expected[direction].items():
            assert result[direction][key] == pytest.approx(value), (direction, key)
    assert result["rsum"] == pytest.approx(expected["rsum"])


def test_five_captions_per_image_matches_brute_force():
    rng = np.random.default_rng(0)
    n_images = 60
    image_of = np.repeat(np.arange(n_images), 5)
    # scores with some signal so that recalls are neither 0 nor 100
    sims = rng.normal(size=(n_images, 5 * n_images)) + 2.0 * (np.arange(n_images)[:, None] == image_of[None, :])
    result = retrieval_metrics(sims, image_of)
    assert_same(result, brute_force(sims, list(image_of)))
    assert result["n_images"] == n_images and result["n_captions"] == 5 * n_images
    assert 0 < result["i2t"]["R@1"] < 100


def test_irregular_captions_per_image_in_shuffled_order():
    rng = np.random.default_rng(1)
    n_images = 40
    counts = rng.integers(1, 8, size=n_images)
    image_of = rng.permutation(np.repeat(np.arange(n_images), counts))
    sims = rng.normal(size=(n_images, len(image_of))).astype(np.float32)
    sims += 1.5 * (np.arange(n_images)[:, None] == image_of[None, :])
    assert_same(retrieval_metrics(sims, image_of), brute_force(sims, list(image_of)))


def test_hand_checked_tiny_example():
    # images 0 and 1; captions c0, c1 describe image 0 and c2 image 1.
    #            c0   c1   c2
    # image 0: 0.9  0.1  0.5   -> c0 first: i2t rank 1
    # image 1: 0.8  0.2  0.3   -> order c0, c2, c1: own caption c2 second, rank 2
    # i2t ranks (1-based) [1, 2]: R@1 50, R@5 100, R@10 100, medr floor(median(0, 1)) + 1 = 1, meanr 1.5
    # t2i: c0 column (0.9, 0.8) -> image 0 first, rank 1; c1 (0.1, 0.2) -> image 1 first, rank 2;
    #      c2 (0.5, 0.3) -> image 0 first, rank 2.  R@1 33.33, R@5 100, R@10 100, medr 2, meanr 5/3
    # rsum = 50 + 100 + 100 + 33.33 + 100 + 100 = 483.33
    sims = np.array([[0.9, 0.1, 0.5], [0.8, 0.2, 0.3]])
    result = retrieval_metrics(sims, np.array([0, 0, 1]))
    assert result["i2t"] == pytest.approx({"R@1": 50.0, "R@5": 100.0, "R@10": 100.0, "medr": 1.0, "meanr": 1.5})
    assert result["t2i"] == pytest.approx({"R@1": 100 / 3, "R@5": 100.0, "R@10": 100.0, "medr": 2.0,
                                           "meanr": 5 / 3})
    assert result["rsum"] == pytest.approx(1450 / 3)


def test_ties_count_against_the_model():
    # a constant matrix: every caption ties with the right one, so each right answer is ranked last
    sims = np.zeros((4, 8))
    image_of = np.repeat(np.arange(4), 2)
    result = retrieval_metrics(sims, image_of)
    assert result["i2t"]["meanr"] == 8 - 2 + 1  # 6 other captions above the best own caption
    assert result["t2i"]["meanr"] == 4  # 3 other images above
    assert result["i2t"]["R@1"] == result["t2i"]["R@1"] == result["i2t"]["R@5"] == 0.0


def test_coco1k_folds_average_then_sum():
    rng = np.random.default_rng(2)
    fold, n_folds = 12, 3
    image_of = np.repeat(np.arange(fold * n_folds), 2)
    sims = rng.normal(size=(fold * n_folds, len(image_of))) + (np.arange(fold * n_folds)[:, None] == image_of)
    result = fold_metrics(sims, image_of, fold_size=fold)
    folds = []
    for f in range(n_folds):
        rows = np.arange(f * fold, (f + 1) * fold)
        columns = np.flatnonzero(np.isin(image_of, rows))
        folds.append(brute_force(sims[np.ix_(rows, columns)], list(image_of[columns] - f * fold)))
    for direction in ("i2t", "t2i"):
        for key in ("R@1", "R@5", "R@10", "medr", "meanr"):
            assert result[direction][key] == pytest.approx(np.mean([r[direction][key] for r in folds]))
    assert result["rsum"] == pytest.approx(sum(result[d][f"R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10)))
    with pytest.raises(VLToolsError, match="folds"):
        fold_metrics(sims, image_of, fold_size=10)


def test_sims_file_round_trip_and_checks(tmp_path):
    sims = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = tmp_path / "sims.h5"
    write_sims(path, sims, ["a", "b"], ["c0", "c1", "c2"], ["a", "a", "b"], {"model": "test"})
    loaded = read_sims(path)
    np.testing.assert_array_equal(loaded.sims, sims)
    assert (loaded.image_ids, loaded.caption_ids, loaded.caption_image_ids) == (["a", "b"], ["c0", "c1", "c2"],
                                                                               ["a", "a", "b"])
    assert list(caption_image_index(loaded.image_ids, loaded.caption_image_ids, path)) == [0, 0, 1]
    with pytest.raises(VLToolsError, match="'zzz'"):
        caption_image_index(["a", "b"], ["a", "zzz"], path)
    with pytest.raises(VLToolsError, match="no caption: 'b'"):
        caption_image_index(["a", "b"], ["a", "a"], path)
    bad = tmp_path / "bad.h5"
    write_arrays(bad, "sims", {"sims": np.zeros((2, 2)), "image_ids": ["a", "a"], "caption_ids": ["x", "y"]})
    with pytest.raises(VLToolsError, match="duplicate id 'a'"):
        read_sims(bad)
    write_arrays(bad, "sims", {"sims": np.zeros((3, 2)), "image_ids": ["a", "b"], "caption_ids": ["x", "y"]})
    with pytest.raises(VLToolsError, match="does not match"):
        read_sims(bad)
    write_arrays(bad, "sims", {"sims": np.full((2, 2), np.nan), "image_ids": ["a", "b"], "caption_ids": ["x", "y"]})
    with pytest.raises(VLToolsError, match="NaN"):
        read_sims(bad)


def _rankings(sims: np.ndarray, images: list[str], captions: list[str], top: int) -> list[dict]:
    rows = []
    for i, image in enumerate(images):
        order = np.argsort(-sims[i])[:top]
        rows.append({"query": image, "direction": "i2t", "ids": [captions[j] for j in order],
                     "scores": [float(sims[i, j]) for j in order]})
    for j, caption in enumerate(captions):
        order = np.argsort(-sims[:, j])[:top]
        rows.append({"query": caption, "direction": "t2i", "ids": [images[i] for i in order],
                     "scores": [float(sims[i, j]) for i in order]})
    return rows


def test_full_rankings_give_the_matrix_numbers_and_topk_lists_what_is_known():
    rng = np.random.default_rng(3)
    images = [f"img{i}" for i in range(15)]
    image_of = np.repeat(np.arange(15), 3)
    captions = [f"img{i}#{k}" for i in range(15) for k in range(3)]
    sims = rng.normal(size=(15, 45))
    expected = brute_force(sims, list(image_of))
    caption_images = [images[i] for i in image_of]
    i2t, t2i, shortest = rankings_ranks(_rankings(sims, images, captions, 100), captions, caption_images, "r.jsonl")
    assert shortest is None     # every list ranks all its candidates: nothing is a lower bound
    assert_same(summarize(i2t, t2i), expected)
    # top-2 lists: ranks beyond 2 are unknown; recalls at K <= 2 stay exact, R@5 only counts what is listed
    i2t, t2i, shortest = rankings_ranks(_rankings(sims, images, captions, 2), captions, caption_images, "r.jsonl")
    result = summarize(i2t, t2i)
    assert shortest == 2
    assert result["i2t"]["R@1"] == pytest.approx(expected["i2t"]["R@1"])
    assert result["t2i"]["R@1"] == pytest.approx(expected["t2i"]["R@1"])
    assert result["t2i"]["meanr"] is None and result["t2i"]["medr"] is None  # most captions' image is beyond 2
    # top-20 lists: each caption's list holds all 15 images (complete), each image's 20 of its 45 captions
    assert rankings_ranks(_rankings(sims, images, captions, 20), captions, caption_images, "r.jsonl")[2] == 20


def test_rankings_errors_name_the_ids():
    captions, caption_images = ["c0", "c1"], ["a", "b"]
    good = [{"query": "a", "direction": "i2t", "ids": ["c0", "c1"], "scores": [1, 0]},
            {"query": "b", "direction": "i2t", "ids": ["c1"], "scores": [1]},
            {"query": "c0", "direction": "t2i", "ids": ["a"], "scores": [1]},
            {"query": "c1", "direction": "t2i", "ids": ["b"], "scores": [1]}]
    rankings_ranks(good, captions, caption_images, "r.jsonl")
    with pytest.raises(VLToolsError, match="t2i queries are missing: 'c1'"):
        rankings_ranks(good[:3], captions, caption_images, "r.jsonl")
    unknown = [*good[:3], {"query": "c1", "direction": "t2i", "ids": ["zz"], "scores": [1]}]
    with pytest.raises(VLToolsError, match="'zz'"):
        rankings_ranks(unknown, captions, caption_images, "r.jsonl")
    stranger = [*good, {"query": "q9", "direction": "i2t", "ids": [], "scores": []}]
    with pytest.raises(VLToolsError, match="'q9'"):
        rankings_ranks(stranger, captions, caption_images, "r.jsonl")


def test_average_sims_is_the_elementwise_mean_and_checks_ids():
    rng = np.random.default_rng(5)
    a, b, c = (rng.normal(size=(2, 4)).astype(np.float32) for _ in range(3))
    ids = (["i0", "i1"], ["c0", "c1", "c2", "c3"], ["i0", "i0", "i1", "i1"])
    mean = average_sims([("a", Sims(a, *ids)), ("b", Sims(b, *ids)), ("c", Sims(c, *ids))])
    assert mean.sims == pytest.approx((a.astype(np.float64) + b + c) / 3)
    assert (mean.image_ids, mean.caption_ids, mean.caption_image_ids) == ids
    with pytest.raises(VLToolsError, match="b: /caption_image_ids: has other ids than a"):
        average_sims([("a", Sims(a, *ids)), ("b", Sims(b, ids[0], ids[1], ["i0", "i1", "i1", "i1"]))])


def test_npy_matrix_in_the_precomp_layout(tmp_path):
    np.save(tmp_path / "m.npy", np.arange(20, dtype=np.float32).reshape(2, 10))
    sims = read_npy_sims(tmp_path / "m.npy", prefix="test_")
    assert sims.image_ids == ["test_0", "test_1"]
    assert sims.caption_ids[:6] == ["test_0#0", "test_0#1", "test_0#2", "test_0#3", "test_0#4", "test_1#0"]
    assert sims.caption_image_ids == ["test_0"] * 5 + ["test_1"] * 5
    with pytest.raises(VLToolsError, match="does not fit the 3 images x 10 captions"):
        read_npy_sims(tmp_path / "m.npy", ["a", "b", "c"], [str(k) for k in range(10)], ["a"] * 10)
