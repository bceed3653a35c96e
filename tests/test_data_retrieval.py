"""data/retrieval.py: files scored as eval.retrieval scores their arrays; ensembles, .npy with captions, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from vltools.data.retrieval import is_matrix, score_retrieval
from vltools.errors import VLToolsError
from vltools.eval.retrieval import retrieval_metrics
from vltools.io.records import write_records
from vltools.io.sims import write_sims

IMAGES = ["a", "b", "c", "d"]
CAPTION_IMAGES = [image for image in IMAGES for _ in range(2)]


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(1)
    first, second = (rng.normal(size=(4, 8)).astype(np.float32) for _ in range(2))
    captions = [f"{image}#{k}" for image in IMAGES for k in range(2)]
    for name, matrix in (("one.h5", first), ("two.h5", second)):
        write_sims(tmp_path / name, matrix, IMAGES, captions, CAPTION_IMAGES)
    np.save(tmp_path / "one.npy", first)
    write_records(tmp_path / "caps.jsonl", [{"image_id": i, "caption": "x", "caption_id": c, "split": "test"}
                                            for c, i in zip(captions, CAPTION_IMAGES, strict=True)])
    return tmp_path, first, second


def test_matrices_score_as_their_arrays_and_average_into_an_ensemble(files):
    folder, first, second = files
    index = np.repeat(np.arange(4), 2)
    alone = score_retrieval([folder / "one.h5"])
    expected = retrieval_metrics(first, index)
    assert alone["i2t"] == expected["i2t"] and alone["t2i"] == expected["t2i"] and alone["protocol"] == "full"
    assert score_retrieval([folder / "one.npy"], folder / "caps.jsonl")["rsum"] == expected["rsum"]
    both = score_retrieval([folder / "one.h5", folder / "two.h5"])
    assert both["rsum"] == retrieval_metrics((first + second) / 2, index)["rsum"]


def test_refusals_name_the_file(files):
    folder, _, _ = files
    write_records(folder / "r.jsonl", [{"query": "a", "direction": "i2t", "ids": ["a#0"], "scores": [1.0]}])
    assert is_matrix(folder / "one.npy") and not is_matrix(folder / "r.jsonl")
    with pytest.raises(VLToolsError, match="r.jsonl: rankings cannot join an ensemble"):
        score_retrieval([folder / "one.h5", folder / "r.jsonl"])
    with pytest.raises(VLToolsError, match=r"rankings need captions \(the captions they rank\)"):
        score_retrieval([folder / "r.jsonl"])
    with pytest.raises(VLToolsError, match="needs a sims HDF5"):
        score_retrieval([folder / "r.jsonl"], folder / "caps.jsonl", protocol="coco1k")
    with pytest.raises(VLToolsError, match="protocol 'coco5k'"):
        score_retrieval([folder / "one.h5"], protocol="coco5k")
    with pytest.raises(VLToolsError, match="no scores given"):
        score_retrieval([])
