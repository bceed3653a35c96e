"""`extract-regions --regions bottom-up` as a step of the extraction runner (vltools.infer.bottom_up) with a tiny
detector converted from random weights in the released layout, on real photos: shapes and dtypes, fixed and
adaptive K with /num_regions, labels in range, boxes in original pixels, determinism, a batch equal to single
images, the recorded extractor and vocabularies, the model store, the refusals, and bf16 / fp16 on a CPU."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from bottom_up_helpers import FEATURE_DIM, decisive_model, save_tiny_detector
from PIL import Image
from test_convert_bottom_up_weights import TINY

from vltools.errors import VLToolsError
from vltools.infer.bottom_up import BottomUpExtractor
from vltools.infer.settings import RunOptions
from vltools.io.model_store import add_model
from vltools.vision.images import ImageItem

PHOTOS = Path(__file__).parent / "data" / "photos"
ROOT = Path(__file__).resolve().parents[1]
RUN = RunOptions(workers=0, device="cpu", dtype="float32")
CLASSES, ATTRIBUTES = TINY["num_classes"] - 1, TINY["num_attributes"] - 1


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    return save_tiny_detector(tmp_path_factory.mktemp("bua"))


@pytest.fixture(scope="module")
def items() -> list[ImageItem]:
    return [ImageItem(name, PHOTOS / name) for name in ("chelsea.png", "china.jpg", "flower.jpg")]


def compute(extractor: BottomUpExtractor, items: list[ImageItem]) -> dict[str, np.ndarray]:
    dataset = extractor.dataset(items)
    samples = [dataset[i] for i in range(len(items))]
    with torch.inference_mode():
        return extractor(samples, list(items))


@pytest.fixture(scope="module")
def fixed(weights, items) -> dict[str, np.ndarray]:
    return compute(BottomUpExtractor(RUN, str(weights), num_regions=36), items)


def test_fixed_k_rows_have_the_documented_shapes_dtypes_and_ranges(fixed, items):
    assert fixed["regions"].shape == (3, 36, FEATURE_DIM) and fixed["regions"].dtype == np.float32
    assert fixed["boxes"].shape == (3, 36, 4) and "num_regions" not in fixed
    for name, size in (("labels", CLASSES), ("attributes", ATTRIBUTES)):
        assert fixed[name].shape == (3, 36) and fixed[name].dtype == np.int32
        assert fixed[name].min() >= 0 and fixed[name].max() < size
        scores = fixed[name.removesuffix("s") + "_scores"]
        assert scores.dtype == np.float32 and (scores > 0).all() and (scores <= 1).all()
    assert len(np.unique(fixed["labels"])) > 1
    assert fixed["image_size"].tolist() == [[300, 451], [427, 640], [427, 640]]
    boxes = fixed["boxes"]
    assert (boxes[..., 2] > boxes[..., 0]).all() and (boxes[..., 3] > boxes[..., 1]).all()
    assert boxes[0, :, 2].max() <= 450 and boxes[1, :, 2].max() <= 639 and boxes[1, :, 3].max() <= 426
    assert boxes[1, :, 2].max() > TINY["test_max_size"]  # stored in original pixels, not the detector's input's
    assert (np.abs(fixed["regions"]).sum(axis=2) > 0).all()


def test_adaptive_k_writes_num_regions_and_zero_pads(weights, items):
    extractor = BottomUpExtractor(RUN, str(weights), num_regions=None, min_regions=5, max_regions=30,
                                  score_threshold=0.2)
    assert extractor.variable and extractor.slots == 30
    out = compute(extractor, items)
    counts = out["num_regions"]
    assert out["regions"].shape == (3, 30, FEATURE_DIM) and counts.dtype == np.int32
    assert ((counts >= 5) & (counts <= 30)).all()
    for row, count in enumerate(counts):
        for name in ("regions", "boxes", "labels", "label_scores", "attributes", "attribute_scores"):
            assert not out[name][row, count:].any(), name
        assert (out["label_scores"][row, :count] > 0).all()
    everything = compute(BottomUpExtractor(RUN, str(weights), num_regions=None, min_regions=5, max_regions=30,
                                           score_threshold=0.0), items)
    nothing = compute(BottomUpExtractor(RUN, str(weights), num_regions=None, min_regions=5, max_regions=30,
                                        score_threshold=1.01), items)
    assert everything["num_regions"].tolist() == [30, 30, 30]  # all pass: capped at --max-regions
    assert nothing["num_regions"].tolist() == [5, 5, 5]  # none pass: the --min-regions most confident


def test_max_regions_beyond_the_proposals_is_capped_and_num_regions_beyond_them_refused(weights):
    proposals = TINY["rpn_post_nms"]
    assert BottomUpExtractor(RUN, str(weights), num_regions=None, max_regions=100).slots == proposals
    with pytest.raises(VLToolsError, match=f"^num_regions=50: the detector of .*tiny_bua.pt proposes at most "
                                           f"{proposals} boxes"):
        BottomUpExtractor(RUN, str(weights), num_regions=50)
    with pytest.raises(VLToolsError, match="^min_regions=9 max_regions=3: need 1 <= min <= max"):
        BottomUpExtractor(RUN, str(weights), num_regions=None, min_regions=9, max_regions=3)


def test_rows_are_deterministic(weights, items, fixed):
    again = compute(BottomUpExtractor(RUN, str(weights), num_regions=36), items)
    for name, value in fixed.items():
        assert np.array_equal(again[name], value), name


def test_a_batch_of_four_equals_each_image_alone(weights):
    four = [ImageItem(name, PHOTOS / name) for name in ("chelsea.png", "china.jpg", "coffee.png", "rocket.jpg")]
    extractor = BottomUpExtractor(RUN, str(weights), num_regions=None, min_regions=5, max_regions=30)
    batch = compute(extractor, four)
    for row, item in enumerate(four):
        alone = compute(extractor, [item])
        assert alone["num_regions"][0] == batch["num_regions"][row]
        assert np.array_equal(alone["labels"][0], batch["labels"][row])
        for name in ("regions", "boxes", "label_scores", "attribute_scores"):
            np.testing.assert_allclose(alone[name][0], batch[name][row], rtol=1e-4, atol=1e-4, err_msg=name)


def test_attrs_record_the_extractor_and_a_digest_of_the_weights_alone(tmp_path, weights, items):
    attrs = BottomUpExtractor(RUN, str(weights), num_regions=36).attrs(items)
    assert attrs["extractor"] == "bottom-up" and attrs["feature_dim"] == FEATURE_DIM and attrs["num_regions"] == "36"
    assert len(attrs["weights"]) == 16 and "label_names" not in attrs
    renamed = tmp_path / "other"
    renamed.mkdir()
    again = save_tiny_detector(renamed)  # the same weights converted again, from a file elsewhere
    assert BottomUpExtractor(RUN, str(again), num_regions=36).attrs(items)["weights"] == attrs["weights"]
    other = tmp_path / "seed1"
    other.mkdir()
    assert BottomUpExtractor(RUN, str(save_tiny_detector(other, seed=1))).attrs(items)["weights"] != attrs["weights"]
    adaptive = BottomUpExtractor(RUN, str(weights), num_regions=None, max_regions=30).attrs(items)
    assert adaptive["num_regions"] == "10-30 at score >= 0.2"


def test_vocabularies_are_stored_as_json_attributes(tmp_path, weights, items):
    objects = [f"thing{i},synonym" if i % 2 else f"thing {i}" for i in range(CLASSES)]
    (tmp_path / "objects_vocab.txt").write_text("\n".join(["__background__", *objects]) + "\n", encoding="utf-8")
    (tmp_path / "attributes_vocab.txt").write_text("red\nlarge\nwooden\nshiny\n\n", encoding="utf-8")
    attrs = BottomUpExtractor(RUN, str(weights), vocab_dir=tmp_path).attrs(items)
    assert json.loads(attrs["label_names"]) == [name.split(",")[0] for name in objects]
    assert json.loads(attrs["attribute_names"]) == ["red", "large", "wooden", "shiny"]
    (tmp_path / "attributes_vocab.txt").write_text("red\nlarge\n", encoding="utf-8")
    with pytest.raises(VLToolsError, match="attributes_vocab.txt: 2 class names, but the detector has 4 classes"):
        BottomUpExtractor(RUN, str(weights), vocab_dir=tmp_path)


def test_weights_by_model_store_name(tmp_path, monkeypatch, weights, items, fixed):
    monkeypatch.setenv("VLTOOLS_MODELS", str(tmp_path / "store"))
    with pytest.raises(VLToolsError, match="detector_weights=bottom-up: neither a checkpoint file nor a model in "
                                           "the store .*run `bin/fetch_bottom_up_weights.sh` in the vltools"):
        BottomUpExtractor(RUN)
    add_model("bottom-up", [weights])
    np.testing.assert_allclose(compute(BottomUpExtractor(RUN), items[:1])["regions"][0], fixed["regions"][0],
                               rtol=1e-4, atol=1e-4)
    add_model("two", [weights, weights])
    with pytest.raises(VLToolsError, match="--detector-weights two: names 2 checkpoints"):
        BottomUpExtractor(RUN, "two")


@pytest.mark.parametrize(("name", "expected", "output"), [
    ("bottom-up", "bin/fetch_bottom_up_weights.sh", "bua.pt"),
    ("bottom-up-k36", "bin/fetch_bottom_up_weights.sh --fixed36", "bua-k36.pt"),
])
def test_a_missing_released_detector_names_the_command_that_fetches_it(tmp_path, monkeypatch, name, expected, output):
    """bottom-up-k36 once pointed to bin/fetch_bottom_up_weights.sh without the --fixed36 it needs; the command
    named, run as printed (offline), is the one that makes that detector."""
    monkeypatch.setenv("VLTOOLS_MODELS", str(tmp_path / "store"))
    with pytest.raises(VLToolsError) as error:
        BottomUpExtractor(RUN, name)
    command = re.search(r"run `(bin/[^`]*)`", str(error.value)).group(1)
    assert command == expected
    dest = tmp_path / "models"
    result = subprocess.run([*command.split(), str(dest)], cwd=ROOT, env={**os.environ, "VLTOOLS_OFFLINE": "1"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and f"converts it to {dest}/{output}" in result.stderr


def test_images_too_small_for_any_box_fail_with_their_reason(tmp_path, weights):
    Image.new("RGB", (3, 200), (90, 120, 30)).save(tmp_path / "thin.png")  # TINY proposes boxes of 4 pixels up
    shutil.copy(PHOTOS / "chelsea.png", tmp_path / "cat.png")
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff not really")
    dataset = BottomUpExtractor(RUN, str(weights)).dataset(
        [ImageItem(name, tmp_path / name) for name in ("thin.png", "cat.png", "broken.jpg")])
    assert dataset[0]["error"] == "3x200 pixels: the bottom-up detector proposes no box with a side under 4 pixels"
    assert dataset[1]["image"].shape == (3, 300, 451) and dataset[1]["image"].dtype == torch.uint8
    assert "error" in dataset[2]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_on_a_cpu_keeps_the_fp32_boxes_of_a_decisive_detector(tmp_path, precision):
    """Under autocast only the convolutions and linear layers run in low precision: with no decision near a tie
    (decisive_model), the boxes of every photo are fp32's within a pixel, while the features show the low
    precision. (The CPU refused bf16 and fp16 once: torchvision's CPU RoI pooling has no bf16 kernel.)"""
    weights = str(save_tiny_detector(tmp_path, model=decisive_model()))
    photos = [ImageItem(path.name, path) for path in sorted(PHOTOS.iterdir())]
    runs = {name: compute(BottomUpExtractor(RunOptions(workers=0, device="cpu", precision=name), weights,
                                            num_regions=None, min_regions=1, max_regions=TINY["rpn_post_nms"]),
                          photos)
            for name in ("fp32", precision)}
    full, low = runs["fp32"], runs[precision]
    assert len(photos) == 5 and (full["num_regions"] > 5).all()
    assert low["num_regions"].tolist() == full["num_regions"].tolist()
    assert np.abs(low["boxes"] - full["boxes"]).max() <= 1.0
    assert np.array_equal(low["labels"], full["labels"])
    change = np.linalg.norm(low["regions"] - full["regions"]) / np.linalg.norm(full["regions"])
    assert 0 < change < 0.05
