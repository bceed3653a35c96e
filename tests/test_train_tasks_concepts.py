"""The concept CNN task on three 32x32 images with a random-weight resnet18: defaults, refusals (a concepts file whose
K differs from model.num_concepts, the input count, a missing image, a bad image), multi-hot targets, one loss step
against Eq. 1 computed by hand (and its gradient), validation mAP against a direct average precision."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
from PIL import Image
from precision_helpers import assert_trains_in_every_precision
from reproducible import assert_same_losses_for_the_same_seed

from vltools.errors import VLToolsError
from vltools.text.concepts import FALLBACK_TAGGER, ConceptVocabulary
from vltools.training import config_defaults
from vltools.training.tasks.concepts import (
    CONCEPT_TRAIN_DEFAULTS,
    MODEL_DEFAULTS,
    TASK_DEFAULTS,
    ConceptImages,
    average_precision,
    build_task,
    defaults,
)
from vltools.vision.images import ImageItem

CONCEPTS = ["cat", "dog", "tree"]
CAPTIONS = [("im0", "a dog", "train"), ("im0", "a dog near a tree", "train"), ("im1", "a cat", "train"),
            ("im2", "a tree", "val"), ("im2", "the cats", "val")]
TARGETS = {"im0": [0, 1, 1], "im1": [1, 0, 0], "im2": [1, 0, 1]}     # by hand: over cat, dog, tree
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])   # ImageNet's, as published


def mirrored(rng: np.random.Generator) -> np.ndarray:
    """A 32x32 RGB image equal to its horizontal flip (so that training's random flip changes nothing)."""
    half = rng.integers(0, 256, (32, 16, 3), dtype=np.uint8)
    return np.concatenate([half, half[:, ::-1]], axis=1)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("concepts")
    rng = np.random.default_rng(0)
    pixels = {}
    with open(folder / "images.jsonl", "w", encoding="utf-8") as images:
        for n in range(3):
            pixels[f"im{n}"] = mirrored(rng) if n < 2 else rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
            Image.fromarray(pixels[f"im{n}"]).save(folder / f"im{n}.png")
            images.write(json.dumps({"image_id": f"im{n}", "path": f"im{n}.png"}) + "\n")
    with open(folder / "caps.jsonl", "w", encoding="utf-8") as caps:
        for image_id, caption, split in CAPTIONS:
            caps.write(json.dumps({"image_id": image_id, "caption": caption, "split": split}) + "\n")
    with open(folder / "concepts.json", "w", encoding="utf-8") as stream:
        ConceptVocabulary(CONCEPTS, CONCEPTS, [2, 2, 2], FALLBACK_TAGGER).save(stream)
    inputs = [str(folder / "images.jsonl"), str(folder / "caps.jsonl"), str(folder / "concepts.json")]
    return folder, inputs, pixels


@pytest.fixture(scope="module")
def task(world):
    """The task on the world's files (built once: a resnet18 takes a moment); tests must not change its model."""
    torch.manual_seed(0)
    return build_task("concepts", world[1], tiny_config())


def tiny_config(**model) -> dict:
    config = config_defaults("concepts")
    config["model"].update({"backbone": "resnet18", **model})
    config["task"].update({"weights": "none", "image_size": 32, "val_batch_size": 2})
    return config


def normalized(image: np.ndarray) -> torch.Tensor:
    """[3, 32, 32] float: uint8 pixels / 255, minus ImageNet's mean, over its std."""
    return torch.from_numpy(((image / 255.0 - MEAN) / STD).transpose(2, 0, 1).astype(np.float32))


# ---- defaults ------------------------------------------------------------------------------------------------------

def test_defaults_are_the_paper_s_settings_and_fresh_copies():
    config = defaults("concepts")
    assert config["model"] == {"backbone": "vgg19", "num_concepts": 256}
    assert config["task"] == {"image_size": 224, "weights": "imagenet", "val_batch_size": 64}
    train = config["train"]
    assert (train["batch_size"], train["epochs"], train["lr"], train["lr_update"], train["val_every"]) == \
        (32, 20, 1e-4, 10, 0)
    config["model"]["num_concepts"] = 7
    config["task"]["image_size"] = 1
    config["train"]["epochs"] = 1
    assert MODEL_DEFAULTS["num_concepts"] == 256 and TASK_DEFAULTS["image_size"] == 224
    assert CONCEPT_TRAIN_DEFAULTS["epochs"] == 20
    assert config_defaults("concepts")["train"]["batch_size"] == 32      # the task's train section wins


# ---- refusals ------------------------------------------------------------------------------------------------------

def test_num_concepts_other_than_the_concepts_file_s_k_is_refused(world):
    _, inputs, _ = world
    with pytest.raises(VLToolsError) as exc:
        build_task("concepts", inputs, tiny_config(num_concepts=5))
    message = str(exc.value)
    assert "the concepts file has K=3 but the config says model.num_concepts=5" in message and "\n" not in message


def test_num_concepts_left_at_its_default_becomes_k(task):
    assert task.model_config == {"backbone": "resnet18", "num_concepts": 3}
    assert task.model.classifier.out_features == 3 and task.model.classifier.in_features == 512


def test_num_concepts_equal_to_k_is_accepted(world):
    _, inputs, _ = world
    assert build_task("concepts", inputs, tiny_config(num_concepts=3)).model.classifier.out_features == 3


def test_an_image_size_below_the_backbone_stride_is_refused(world):
    _, inputs, _ = world
    config = tiny_config()
    config["task"]["image_size"] = 1
    with pytest.raises(VLToolsError, match=r"^task.image_size=1 is smaller than the 32-pixel stride of backbone "
                                           r"resnet18, .*; set task.image_size to at least 32$"):
        build_task("concepts", inputs, config)


def test_three_inputs_are_required(world):
    _, inputs, _ = world
    with pytest.raises(VLToolsError, match="^model=concepts takes three inputs, IMAGES CAPS.jsonl CONCEPTS.json; "
                                           "got 2$"):     # from Python; the command line says --model concepts
        build_task("concepts", inputs[:2], tiny_config())


def test_a_captioned_image_missing_from_the_images_is_named(world, tmp_path):
    folder, inputs, _ = world
    caps = tmp_path / "caps.jsonl"
    caps.write_text((folder / "caps.jsonl").read_text(encoding="utf-8")
                    + json.dumps({"image_id": "ghost", "caption": "a cat", "split": "val"}) + "\n", encoding="utf-8")
    with pytest.raises(VLToolsError) as exc:
        build_task("concepts", [inputs[0], str(caps), inputs[2]], tiny_config())
    assert str(exc.value).startswith(f"{caps}: image_id 'ghost' is not among the images of {inputs[0]} (1 missing)")


def test_an_unreadable_image_is_refused_naming_it(tmp_path):
    (tmp_path / "broken.png").write_bytes(b"not a png")
    data = ConceptImages([ImageItem("b0", tmp_path / "broken.png")], np.zeros((1, 3), np.float32), 32, False)
    with pytest.raises(VLToolsError) as exc:
        data[0]
    assert str(exc.value).startswith(f"{tmp_path / 'broken.png'}: image 'b0': ") and "\n" not in str(exc.value)


# ---- data, loss and validation -------------------------------------------------------------------------------------

def test_targets_are_the_concepts_of_all_the_image_s_captions(task):
    np.testing.assert_array_equal(task.train_data.targets, [TARGETS["im0"], TARGETS["im1"]])
    np.testing.assert_array_equal(task.val_data.targets, [TARGETS["im2"]])
    assert task.train_data.flip and not task.val_data.flip


def test_validation_images_are_the_unflipped_pixels_and_training_flips_at_random(world, task):
    folder, _, pixels = world
    image = task.val_data[0]["image"]
    assert image.dtype == torch.uint8
    np.testing.assert_array_equal(image.permute(1, 2, 0).numpy(), pixels["im2"])
    data = ConceptImages([ImageItem("im2", folder / "im2.png")], np.zeros((1, 3), np.float32), 32, True, seed=5)
    seen = []
    for epoch in range(20):
        data.set_epoch(epoch)
        got = data[0]["image"].permute(1, 2, 0).numpy()
        flipped = np.array_equal(got, pixels["im2"][:, ::-1])
        assert flipped or np.array_equal(got, pixels["im2"])
        seen.append(flipped)
    assert set(seen) == {True, False}
    again = ConceptImages([ImageItem("im2", folder / "im2.png")], np.zeros((1, 3), np.float32), 32, True, seed=5)
    for epoch in range(20):  # the flips are the seed's and the epoch's, not those of torch's global generator
        torch.manual_seed(epoch)
        again.set_epoch(epoch)
        assert np.array_equal(again[0]["image"].numpy(), pixels["im2"][:, ::-1].transpose(2, 0, 1)) == seen[epoch]


def test_one_loss_step_is_eq_1_by_hand_with_its_gradient(world, task):
    _, _, pixels = world
    batch = task.collate([task.train_data[0], task.train_data[1]])
    images = torch.stack([normalized(pixels["im0"]), normalized(pixels["im1"])])
    torch.testing.assert_close(batch["images"], images, atol=1e-5, rtol=1e-5)
    assert batch["targets"].tolist() == [TARGETS["im0"], TARGETS["im1"]]
    model = copy.deepcopy(task.model)
    model.zero_grad()
    loss = task.loss(model, batch)
    loss.backward()
    with torch.no_grad():
        logits = model(images).double()
    expected = sum(math.log(1 + math.exp(-(2 * y - 1) * z)) for row, ys in zip(logits.tolist(), [TARGETS["im0"],
                   TARGETS["im1"]], strict=True) for z, y in zip(row, ys, strict=True)) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    # d loss / d bias_c = sum over the batch of (sigmoid(z_c) - y_c) / B
    targets = torch.tensor([TARGETS["im0"], TARGETS["im1"]], dtype=torch.float64)
    torch.testing.assert_close(model.classifier.bias.grad.double(), (torch.sigmoid(logits) - targets).sum(0) / 2,
                               atol=1e-5, rtol=1e-4)
    with torch.no_grad():                       # a small step down the gradient lowers the loss
        for parameter in model.parameters():
            if parameter.grad is not None:
                parameter -= 1e-3 * parameter.grad
        assert task.loss(model, batch).item() < loss.item()


def brute_ap(scores: np.ndarray, positives: np.ndarray) -> float:
    """Average precision by definition: the mean over positives of the precision at each positive's rank."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    found, total = 0, 0.0
    for rank, i in enumerate(order, 1):
        if positives[i]:
            found += 1
            total += found / rank
    return total / found


def test_average_precision_by_hand():
    scores = np.array([[0.9, 0.1, 0.5], [0.8, 0.7, 0.4], [0.1, 0.2, 0.3]])
    targets = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 0]])
    # concept 0: ranks 1 (hit), 2, 3 (hit) -> (1 + 2/3) / 2; concept 1: rank 1 hit -> 1; concept 2: no positive
    assert average_precision(scores, targets) == pytest.approx(100 * ((1 + 2 / 3) / 2 + 1) / 2)
    assert average_precision(scores, np.zeros_like(targets)) == 0.0


def test_validation_map_against_direct_scores(world, tmp_path):
    folder, inputs, pixels = world
    caps = tmp_path / "caps.jsonl"      # all three images in val, so that mAP ranks several images
    caps.write_text("".join(json.dumps({"image_id": i, "caption": c, "split": "val"}) + "\n"
                            for i, c, _ in CAPTIONS) + json.dumps({"image_id": "im0", "caption": "a dog",
                                                                    "split": "train"}) + "\n", encoding="utf-8")
    torch.manual_seed(1)
    task = build_task("concepts", [inputs[0], str(caps), inputs[2]], tiny_config())
    model = task.model.eval()
    with torch.inference_mode():            # as the trainer calls it
        result = task.validate(model, torch.device("cpu"))
    assert set(result) == {"mAP"}
    with torch.no_grad():
        scores = torch.sigmoid(model(torch.stack([normalized(pixels[i]) for i in ("im0", "im1", "im2")]))).numpy()
    targets = np.array([TARGETS["im0"], TARGETS["im1"], TARGETS["im2"]])
    expected = 100 * np.mean([brute_ap(scores[:, c], targets[:, c]) for c in range(3)])
    assert result["mAP"] == pytest.approx(expected, rel=1e-6)


def test_checkpoint_info_records_the_concepts_and_inputs(world, task):
    _, inputs, _ = world
    info = task.checkpoint_info()
    assert info["model"] == "concepts" and info["vocab"] == CONCEPTS
    assert info["config"] == {"backbone": "resnet18", "num_concepts": 3}
    assert info["inputs"]["images"] == inputs[0] and info["inputs"]["captions"] == inputs[1]
    assert info["inputs"]["weights"] == "none" and info["inputs"]["tagger"] == FALLBACK_TAGGER


def test_same_seed_same_losses_whatever_the_workers(world, tmp_path):
    config = tiny_config()
    config["train"]["batch_size"] = 2
    assert_same_losses_for_the_same_seed(lambda c: build_task("concepts", world[1], c), config, tmp_path)


def test_trains_in_every_precision(world, tmp_path):
    config = tiny_config()
    # 64 px, not 32: ResNet-18's last stage is then 2 x 2, not 1 x 1, so its BatchNorm does not normalise two
    # nearly equal values (of the mirrored images) to +-1 with signs that rounding decides
    config["train"]["batch_size"], config["task"]["image_size"] = 2, 64
    assert_trains_in_every_precision(lambda c: build_task("concepts", world[1], c), config, tmp_path)
