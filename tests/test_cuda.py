"""CUDA against the CPU: every stage that runs a model gives, with `--device cuda`, what it gives with `--device cpu`
(fp32 is IEEE float32 on both since TF32 is off while a stage runs), and training runs on CUDA in each precision.

All tests here are marked `cuda` and are skipped, with the reason, on a machine without a GPU (tests/conftest.py).
`VLTOOLS_TEST_SECOND_DEVICE=cpu pytest -m cuda` runs them with the CPU as the second device, a dry run that checks
that they run (see tests/cuda_helpers.py). On a GPU: `pytest -m cuda` (benchmarks/gpu.sh runs it).

Tolerances: similarities and unit embeddings of tiny models within 1e-6 of the CPU's; what a CNN computes (a
ResNet-18's features or concept probabilities, the tiny detector's features: tens of convolutions, whose sums cuDNN
and oneDNN order differently) within 1e-4 of its largest magnitude. TF32 (10 bits of mantissa) would miss both by
orders of magnitude.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from bottom_up_helpers import decisive_model, save_tiny_detector
from click.testing import CliRunner
from cuda_helpers import second_device
from matching_helpers import make_world, save_tiny
from PIL import Image
from precision_helpers import FIRST_STEP_TOLERANCE
from reproducible import step_losses
from test_convert_bottom_up_weights import TINY as TINY_DETECTOR
from tiny_captioning import PREP, SIZES, make_caption_world, save_captioner
from tiny_matching import make_world as make_training_world

from vltools.cli import cli
from vltools.io.checkpoints import save_checkpoint
from vltools.io.features import FeaturesReader
from vltools.io.sims import read_sims
from vltools.models import build_model
from vltools.models.concepts import build_concept_cnn
from vltools.training import config_defaults
from vltools.training.config import build_config
from vltools.training.tasks.captioning import build_task as captioning_task
from vltools.training.tasks.matching import build_task as matching_task

pytestmark = pytest.mark.cuda

PHOTOS = Path(__file__).parent / "data" / "photos"
SECOND = second_device()
SIMS_ATOL = 1e-6      # similarities and unit embeddings of tiny models
CNN_RELATIVE = 1e-4   # features of convolutional networks, relative to their largest magnitude


def run(*args: object) -> str:
    """`vltools --quiet ARGS` in this process; its standard output."""
    result = CliRunner().invoke(cli, ["--quiet", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def on_both(folder: Path, suffix: str, *args: object) -> tuple[Path, Path]:
    """`vltools ARGS --device cpu -o OUT`, then the same on the second device: the two outputs."""
    outputs = []
    for label, device in (("cpu", "cpu"), ("second", SECOND)):
        outputs.append(folder / f"{label}{suffix}")
        run(*args, "--device", device, "-o", outputs[-1])
    return outputs[0], outputs[1]


def features(path: Path) -> dict[str, np.ndarray]:
    with FeaturesReader(path) as reader:
        return reader.read(reader.ids)


def assert_close_relative(cpu: np.ndarray, other: np.ndarray, relative: float = CNN_RELATIVE) -> None:
    scale = float(np.abs(cpu).max())
    difference = float(np.abs(other.astype(np.float64) - cpu).max())
    assert scale > 0 and difference <= relative * scale, (difference, scale)


def test_grid_extraction(tmp_path):
    cpu, second = on_both(tmp_path, ".h5", "extract-regions", PHOTOS, "--regions", "grid", "--global", "avg",
                          "--backbone", "resnet18", "--weights", "none", "--seed", "0", "--image-size", "64",
                          "--dtype", "float32", "--workers", "0")
    first, other = features(cpu), features(second)
    for name in ("regions", "global"):
        assert_close_relative(first[name], other[name])


def test_bottom_up_extraction_keeps_the_cpus_boxes_in_fp32_and_bf16(tmp_path):
    """A detector with no decision near a tie (decisive_model): the same boxes, labels and counts as the CPU in fp32
    (features to rounding), and in bf16 the fp32 boxes within a pixel, as on the CPU."""
    weights = save_tiny_detector(tmp_path, model=decisive_model())
    args = ["extract-regions", PHOTOS, "--regions", "bottom-up", "--detector-weights", weights, "--min-regions", "1",
            "--max-regions", TINY_DETECTOR["rpn_post_nms"], "--dtype", "float32", "--workers", "0"]
    cpu, second = on_both(tmp_path, ".h5", *args)
    run(*args, "--device", SECOND, "--precision", "bf16", "-o", tmp_path / "bf16.h5")
    first, other, low = features(cpu), features(second), features(tmp_path / "bf16.h5")
    assert (first["num_regions"] > 5).all()
    for run_ in (other, low):
        assert run_["num_regions"].tolist() == first["num_regions"].tolist()
        assert np.array_equal(run_["labels"], first["labels"])
    np.testing.assert_allclose(other["boxes"], first["boxes"], rtol=0, atol=1e-3)
    assert np.abs(low["boxes"] - first["boxes"]).max() <= 1.0
    assert_close_relative(first["regions"], other["regions"])


@pytest.fixture(scope="module")
def matching(tmp_path_factory):
    folder = tmp_path_factory.mktemp("matching")
    feats, captions = make_world(folder)
    return folder, feats, captions, {name: save_tiny(folder / f"{name}.pt", name, seed)
                                     for seed, name in enumerate(("vse", "sgr", "saf"))}


@pytest.mark.parametrize("members", [("sgr",), ("saf",), ("sgr", "saf"), ("vse",)], ids="+".join)
def test_match_similarities(matching, tmp_path, members):
    _, feats, captions, models = matching
    matrices = []
    for device in ("cpu", SECOND):
        path = tmp_path / f"{len(matrices)}.h5"
        run("match", feats, captions, *[part for name in members for part in ("--model", models[name])],
            "--block-images", "3", "--block-captions", "5", "--sims", path, "--device", device,
            "-o", tmp_path / "rankings.jsonl")
        matrices.append(read_sims(path).sims)
    assert matrices[0].shape == (7, 21)
    np.testing.assert_allclose(matrices[1], matrices[0], rtol=0, atol=SIMS_ATOL)


@pytest.mark.parametrize("which", ["features", "captions"])
def test_encode(matching, tmp_path, which):
    _, feats, captions, models = matching
    cpu, second = on_both(tmp_path, ".h5", "encode", {"features": feats, "captions": captions}[which],
                          "--model", models["vse"])
    with h5py.File(cpu, "r") as first, h5py.File(second, "r") as other:
        np.testing.assert_allclose(other["emb"][()], first["emb"][()], rtol=0, atol=SIMS_ATOL)


def write_images(folder: Path, count: int, size: tuple[int, int]) -> Path:
    """`count` random PNGs of `size` (height, width) and an images JSONL naming them; the JSONL's path."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(count):
        Image.fromarray(rng.integers(0, 255, (*size, 3), dtype=np.uint8)).save(folder / f"{i}.png")
        lines.append(json.dumps({"image_id": f"im{i}", "path": f"{i}.png", "split": "test"}))
    (folder / "images.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "images.jsonl"


def test_rmac_encode(tmp_path):
    images = write_images(tmp_path, 4, (40, 48))
    torch.manual_seed(0)
    config = {"backbone": "resnet18", "levels": 3, "scales": "1.0,0.7071", "text": False, "frozen_bn": True}
    save_checkpoint(tmp_path / "rmac.pt", "rmac", config, build_model("rmac", config, 2).state_dict(),
                    vocab=["a", "photo"], train_state={"config": {"task": {"image_size": 32}}}, schema=1)
    cpu, second = on_both(tmp_path, ".h5", "encode", images, "--model", tmp_path / "rmac.pt")
    with h5py.File(cpu, "r") as first, h5py.File(second, "r") as other:
        assert_close_relative(first["emb"][()], other["emb"][()])


def test_concept_scores(tmp_path):
    images = write_images(tmp_path, 3, (32, 32))
    torch.manual_seed(0)
    model, _ = build_concept_cnn("resnet18", "none", 4)
    save_checkpoint(tmp_path / "cnn.pt", "concepts", {"backbone": "resnet18", "num_concepts": 4},
                    model.state_dict(), vocab=["red", "blue", "star", "two"], schema=1)
    cpu, second = on_both(tmp_path, ".h5", "concept-scores", images, "--model", tmp_path / "cnn.pt", "--levels",
                          "1,2", "--image-size", "32", "--crop-size", "16", "--batch-size", "2", "--workers", "0")
    assert_close_relative(features(cpu)["global"], features(second)["global"])


@pytest.fixture(scope="module")
def captioning(tmp_path_factory):
    folder = tmp_path_factory.mktemp("captioning")
    feats, captions = make_caption_world(folder)
    return folder, feats, captions


@pytest.mark.parametrize("name, seed", [("adaptive-attention", 0), ("neuraltalk2", 2)])
def test_beam_search_captions_equal_the_cpus(captioning, tmp_path, name, seed):
    _, feats, captions = captioning
    checkpoint = save_captioner(tmp_path / "captioner.pt", name, captions, seed=seed)
    cpu, second = on_both(tmp_path, ".jsonl", "caption", "--model", checkpoint, feats, captions, "--split", "test",
                          "--beam", "3", "--batch-size", "4")
    first = [json.loads(line) for line in cpu.read_text(encoding="utf-8").splitlines()]
    assert len(first) == 10 and len({record["caption"] for record in first}) > 1
    assert [json.loads(line) for line in second.read_text(encoding="utf-8").splitlines()] == first


def matching_training(folder: Path):
    world = [str(path) for path in make_training_world(folder)]
    config = build_config(config_defaults("sgr"), overrides=["model.embed_size=8", "model.word_dim=4",
                                                             "model.num_regions=4", "model.sim_dim=8",
                                                             "model.sgr_step=1", "model.dropout=0.0",
                                                             "train.batch_size=40"])
    return (lambda c: matching_task("sgr", world, c)), config


def captioning_training(folder: Path):
    pytest.importorskip("pycocoevalcap")   # the validation's reference tokens (not on every GPU machine)
    feats, captions = make_caption_world(folder)
    sizes = {f"model.{key}": value for key, value in SIZES["neuraltalk2"].items()}
    prep = {f"task.{key}": value for key, value in PREP.items()}
    config = build_config(config_defaults("neuraltalk2"), options={"task.objective": "mle", **prep, **sizes,
                                                                   "train.batch_size": 25, "task.val_images": 2})
    return (lambda c: captioning_task("neuraltalk2", [str(feats), str(captions)], c)), config


@pytest.mark.parametrize("family", [matching_training, captioning_training], ids=["sgr", "neuraltalk2"])
def test_training_steps_in_each_precision(tmp_path, family):
    """fp32 on the second device starts from the CPU's loss; tf32, bf16 and fp16 give finite losses, the first near
    fp32's (tf32 keeps fp16's 10 bits of mantissa in products). Dropout is off in both families: CUDA draws other
    masks than the CPU for the same seed."""
    build, config = family(tmp_path)
    cpu = step_losses(build, config, tmp_path / "cpu.pt", seed=3, workers=0)
    fp32 = step_losses(build, config, tmp_path / "fp32.pt", seed=3, workers=0, device=SECOND)
    assert len(fp32) == len(cpu) > 1 and all(math.isfinite(loss) for loss in fp32)
    assert fp32[0] == pytest.approx(cpu[0], rel=1e-5)
    tolerances = {"tf32": FIRST_STEP_TOLERANCE["fp16"], **FIRST_STEP_TOLERANCE}
    for precision, tolerance in tolerances.items():
        low = step_losses(build, config, tmp_path / f"{precision}.pt", seed=3, workers=0, precision=precision,
                          device=SECOND)
        assert len(low) == len(fp32) and all(math.isfinite(loss) for loss in low), (precision, low)
        assert abs(low[0] - fp32[0]) <= tolerance * abs(fp32[0]), (precision, low[0], fp32[0])
