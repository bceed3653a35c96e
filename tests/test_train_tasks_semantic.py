"""The semantic retrieval task on a tiny world: training runs through the shared trainer, mining happens every
round, the whitening layer is fitted to the data, and bad inputs are one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from matching_helpers import fails
from PIL import Image
from precision_helpers import assert_trains_in_every_precision
from reproducible import assert_same_losses_for_the_same_seed

from vltools.cli import cli
from vltools.errors import VLToolsError
from vltools.io.checkpoints import load_checkpoint
from vltools.training import config_defaults
from vltools.training.config import build_config
from vltools.training.tasks.semantic import build_task

WORDS = ["red", "blue", "green", "dog", "cat", "tree"]
OPTIONS = ["--set", "model.backbone=resnet18", "--set", "model.scales=1.0", "--set", "task.weights=none",
           "--set", "task.image_size=32", "--set", "task.queries=4", "--set", "task.relevant=2", "--set",
           "task.pool=10", "--set", "task.per_pair=3", "--set", "task.mine_every=2", "--set", "task.whiten_images=8",
           "--set", "task.cache_images=true", "--set", "task.calibrate_bn=true"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("semantic_task")
    rng = np.random.default_rng(0)
    with open(folder / "images.jsonl", "w") as images, open(folder / "caps.jsonl", "w") as caps:
        for i in range(24):
            split = "train" if i < 16 else "val"
            Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.png")
            images.write(json.dumps({"image_id": f"im{i}", "path": f"{i}.png", "split": split}) + "\n")
            caps.write(json.dumps({"image_id": f"im{i}", "caption": " ".join(rng.choice(WORDS, 3)),
                                   "split": split}) + "\n")
    result = CliRunner().invoke(cli, ["--quiet", "tfidf-proxy", str(folder / "caps.jsonl"), "--k", "3",
                                      "-o", str(folder / "proxy.h5")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return folder


def task_of(folder, *overrides: str):
    settings = [o for o in [*OPTIONS, *overrides] if o != "--set"]
    config = build_config(config_defaults("rmac"), overrides=settings, options={"train.device": "cpu"})
    return build_task("rmac", [str(folder / "images.jsonl"), str(folder / "proxy.h5")], config)


def test_an_image_size_below_the_backbone_stride_is_refused(world):
    with pytest.raises(VLToolsError, match=r"^task.image_size=4 is smaller than the 32-pixel stride of backbone "
                                           r"resnet18, .*; set task.image_size to at least 32$"):
        task_of(world, "--set", "task.image_size=4")


def test_an_unknown_region_grid_is_refused(world):
    with pytest.raises(VLToolsError, match=r"^model.grid must be one of floor, round, not 'nearest'$"):
        task_of(world, "--set", "model.grid=nearest")


def test_whitening_is_fitted_to_the_region_vectors(world):
    torch.manual_seed(0)
    task = task_of(world)
    rows = task.train_rows[:8]
    with torch.no_grad():
        vectors = torch.cat([task.model.scale_regions(task.store.image(int(r))[None])[0] for r in rows])
        whitened = task.model.whiten(vectors).double()
    assert torch.allclose(whitened.mean(0), torch.zeros(512, dtype=torch.float64), atol=1e-3)
    variances = whitened.var(0, unbiased=False)
    # 32-pixel images give 1 x 1 maps: every region of an image is the same vector, so the centred data spans
    # (distinct vectors - 1) directions, each of which must have unit variance after whitening
    directions = len(torch.unique(vectors, dim=0)) - 1
    assert int(((variances - 1).abs() < 1e-2).sum()) == directions > 0


def test_batchnorm_statistics_are_calibrated_on_the_images(world):
    torch.manual_seed(0)
    task = task_of(world)
    first = task.model.backbone.trunk[1]
    assert not torch.allclose(first.running_var, torch.ones_like(first.running_var))
    assert first.momentum == 0.1


def test_each_round_mines_new_triplets_of_training_images(world):
    torch.manual_seed(0)
    task = task_of(world, "--set", "task.loss=vt")
    task.start_epoch(task.model, 0, torch.device("cpu"))
    first = task.train_data.triplets.copy()
    task.start_epoch(task.model, 1, torch.device("cpu"))
    assert not np.array_equal(first, task.train_data.triplets)
    assert set(np.unique(first)) <= set(task.train_rows.tolist())
    batch = task.collate([task.train_data[i] for i in range(4)])
    assert batch["tfidf"].shape[1] == len(task.proxy.vocab)
    loss = task.loss(task.model, batch)
    assert loss.ndim == 0 and loss.item() >= 0


def test_train_writes_the_best_checkpoint_with_the_proxy_vocabulary(world):
    out = world / "rmac.pt"
    result = CliRunner().invoke(cli, ["--quiet", "train", "--model", "rmac", *OPTIONS, "--epochs", "2",
                                      "--batch-size", "4", "--lr", "1e-4", "--device", "cpu",
                                      str(world / "images.jsonl"), str(world / "proxy.h5"), "-o", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    payload = load_checkpoint(out)
    assert payload["model"] == "rmac" and payload["vocab"] == sorted(payload["vocab"])
    assert payload["config"]["grid"] == "floor"   # recorded, so that a later default cannot change its regions
    lines = [json.loads(line) for line in (world / "rmac.pt.log.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines if line["type"] == "val"] == [2, 4]


def test_proxy_images_missing_from_the_images_file(world, capsys):
    (world / "few.jsonl").write_text(json.dumps({"image_id": "im0", "path": "0.png"}) + "\n")
    err = fails(capsys, "train", "--model", "rmac", *OPTIONS, "--device", "cpu", str(world / "few.jsonl"),
                str(world / "proxy.h5"), "-o", str(world / "x.pt"))
    assert "not in" in err and len(err.strip().splitlines()) == 1


def test_same_seed_same_losses_whatever_the_workers(world, tmp_path):
    """The triplets are mined and drawn from (seed, epoch)."""
    settings = [o for o in OPTIONS if o != "--set"]
    config = build_config(config_defaults("rmac"), overrides=[*settings, "train.batch_size=2"])
    inputs = [str(world / "images.jsonl"), str(world / "proxy.h5")]
    assert_same_losses_for_the_same_seed(lambda c: build_task("rmac", inputs, c), config, tmp_path)


def test_trains_in_every_precision(world, tmp_path):
    settings = [o for o in OPTIONS if o != "--set"]
    config = build_config(config_defaults("rmac"), overrides=[*settings, "train.batch_size=2"])
    inputs = [str(world / "images.jsonl"), str(world / "proxy.h5")]
    # the triplet loss, margin + |q - p|^2 - |q - n|^2, is a difference of squared distances between unit vectors
    # (up to 4): after ResNet-18 in bf16 those distances are about 1% off, which the small difference does not share
    assert_trains_in_every_precision(lambda c: build_task("rmac", inputs, c), config, tmp_path, atol=0.03)
