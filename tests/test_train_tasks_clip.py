"""The CLIP task (`train --model clip IMAGES CAPS.jsonl`) on the synthetic world with the recipe's small CLIP
(examples/sgraf/synth_clip.yaml): it learns (rsum well above chance), a stopped run resumed ends where the
uninterrupted one ends, it trains in every precision, its checkpoint is a model that encode and match take (the
match of the validation split scores what training's validation scored), it starts from an OpenCLIP model or a clip
checkpoint (`--init`), and its refusals."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner
from kill_helpers import kill, start_paused
from pipeline_fixtures import synth_world
from precision_helpers import assert_trains_in_every_precision
from reproducible import assert_same_losses_for_the_same_seed
from tiny_matching import chance_rsum

import vltools
from vltools.cli import cli
from vltools.errors import VLToolsError
from vltools.infer.loader import OpenClipModel, load_model
from vltools.io.checkpoints import load_checkpoint
from vltools.stages.match import match as stage_match
from vltools.training import config_defaults
from vltools.training.config import build_config
from vltools.training.tasks.clip import CLIP_TRAIN_DEFAULTS, build_task

pytest.importorskip("open_clip")

pytestmark = pytest.mark.slow     # a shared training run of about a minute on 2 cores

CONFIG = Path(__file__).parent.parent / "examples/sgraf/synth_clip.yaml"
LEARN = ["--epochs", "8", "--batch-size", "16", "--lr", "5e-4", "--seed", "0", "--device", "cpu"]


def train_args(world: Path, output: Path, *extra: object) -> list[str]:
    return ["--quiet", "train", "--model", "clip", str(world / "images.jsonl"), str(world / "captions.jsonl"),
            "--config", str(CONFIG), "-o", str(output), *map(str, extra)]


def train(world: Path, output: Path, *extra: object) -> dict:
    result = CliRunner().invoke(cli, train_args(world, output, *extra), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return load_checkpoint(output)


def config(**train: object) -> dict:
    return build_config(config_defaults("clip"), CONFIG, (), {f"train.{k}": v for k, v in train.items()})


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """200 images: 160 to train on, 20 to validate on."""
    return synth_world(tmp_path_factory.mktemp("clip") / "world", 200)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """40 images: 32 to train on (2 steps of 16), 4 to validate on."""
    return synth_world(tmp_path_factory.mktemp("clip") / "small", 40)


@pytest.fixture(scope="module")
def trained(world, tmp_path_factory):
    output = tmp_path_factory.mktemp("trained") / "clip.pt"
    return output, train(world, output, *LEARN)


def test_defaults_are_fine_tuning_ones():
    sections = config_defaults("clip")
    assert sections["train"] == CLIP_TRAIN_DEFAULTS and sections["train"]["lr"] == 1e-5
    assert sections["model"] == {"arch": "ViT-B-32", "overrides": {}, "preprocess": {}}
    assert sections["task"]["init"] == ""


def test_learns_well_above_chance(trained):
    _, payload = trained
    state = payload["train_state"]
    assert state["best_rsum"] > chance_rsum(20) + 60, (state["best_rsum"], chance_rsum(20))
    assert payload["model"] == "clip" and payload["vocab"] is None


def test_checkpoint_encodes_and_matches_as_training_validated(trained, world, tmp_path):
    """`--model clip.pt` is an OpenCLIP model to encode and match: matching the validation split scores the rsum
    training validated the kept checkpoint with."""
    output, payload = trained
    loaded = load_model(output, "encodable")
    assert isinstance(loaded, OpenClipModel) and loaded.name == "clip"
    images = vltools.encode(world / "images.jsonl", output, device="cpu")
    captions = vltools.encode(world / "captions.jsonl", output, device="cpu", split="val")
    assert images.vectors.shape[1] == captions.vectors.shape[1] == 64
    np.testing.assert_allclose(np.linalg.norm(images.vectors, axis=1), 1, atol=1e-5)
    # the stage itself: the command takes an images folder, whose ids (file names) the synthetic captions lack
    stage_match(world / "images.jsonl", world / "captions.jsonl", [output], split="val", output=tmp_path / "r.jsonl",
                device="cpu")
    scored = vltools.score_retrieval(tmp_path / "r.jsonl", world / "captions.jsonl", split="val")
    assert scored["rsum"] == pytest.approx(payload["train_state"]["best_rsum"], abs=1e-6)


def test_a_stopped_run_resumed_matches_an_uninterrupted_run(small, tmp_path):
    settings = ["--epochs", "2", "--batch-size", "16", "--lr", "5e-4", "--seed", "0", "--device", "cpu",
                "--set", "train.save_every=1", "--set", "train.log_every=1"]
    reference = train(small, tmp_path / "ref.pt", *settings)
    output = tmp_path / "m.pt"
    process = start_paused("vltools.training.trainer:Trainer._save_last", 2, *train_args(small, output,
                                                                                       *settings)[1:])
    assert kill(process, signal.SIGKILL) == -signal.SIGKILL
    assert load_checkpoint(f"{output}.last.pt")["train_state"]["iteration"] == 2
    resumed = train(small, output, *settings, "--resume")
    assert resumed["state_dict"].keys() == reference["state_dict"].keys()
    assert all(torch.equal(resumed["state_dict"][k], reference["state_dict"][k]) for k in reference["state_dict"])
    logs = [[{k: v for k, v in json.loads(line).items() if k != "seconds_per_step"}
             for line in Path(f"{path}.log.jsonl").read_text().splitlines()] for path in (output, tmp_path / "ref.pt")]
    assert logs[0] == logs[1]


def test_same_seed_same_losses_and_every_precision_trains(small, tmp_path):
    def build(settings: dict):
        return build_task("clip", [str(small / "images.jsonl"), str(small / "captions.jsonl")], settings)

    chosen = config(batch_size=16, lr=5e-4)
    assert_same_losses_for_the_same_seed(build, chosen, tmp_path)
    assert_trains_in_every_precision(build, chosen, tmp_path)


def test_init_from_a_clip_checkpoint_or_an_openclip_model(trained, small):
    output, payload = trained
    inputs = [str(small / "images.jsonl"), str(small / "captions.jsonl")]
    task = build_task("clip", inputs, build_config(config_defaults("clip"), None, (), {"task.init": str(output)}))
    assert task.model_config == payload["config"]
    assert all(torch.equal(value, payload["state_dict"][key]) for key, value in task.model.state_dict().items())
    task = build_task("clip", inputs, build_config(config_defaults("clip"), None, (),
                                                   {"task.init": "openclip:ViT-B-32:random"}))
    reference = load_model("openclip:ViT-B-32:random", "encodable").model.state_dict()
    assert task.model_config["arch"] == "ViT-B-32" and task.model_config["preprocess"]["size"] in (224, [224, 224])
    assert all(torch.equal(value, reference[key.removeprefix("clip.")])
               for key, value in task.model.state_dict().items())
    assert task.inputs["init_weights"] == "random (seed 0)"


def test_refusals(trained, small, tmp_path):
    inputs = [str(small / "images.jsonl"), str(small / "captions.jsonl")]
    with pytest.raises(VLToolsError, match=r"vocab: a CLIP model reads captions with open_clip's tokenizer"):
        build_task("clip", inputs, config(), vocab="words.json")
    with pytest.raises(VLToolsError, match=r"takes two inputs, IMAGES CAPS.jsonl; got 1"):
        build_task("clip", inputs[:1], config())
    with pytest.raises(VLToolsError, match=r"model.arch: 'ViT-Nope' is not an open_clip architecture"):
        build_task("clip", inputs, build_config(config_defaults("clip"), None, (), {"model.arch": "ViT-Nope"}))
    bad = yaml.safe_load(CONFIG.read_text())
    bad["model"]["overrides"]["vision_cfg"]["bogus"] = 1
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(VLToolsError, match=r"model.overrides: open_clip cannot build ViT-B-32"):
        build_task("clip", inputs, build_config(config_defaults("clip"), tmp_path / "bad.yaml", ()))
    output, _ = trained
    with pytest.raises(VLToolsError, match="not a captioner"):
        load_model(output, "captioner")
