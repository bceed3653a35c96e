"""train --model l2c on a tiny world: the Eq. 6 loss, auxiliary batches, checkpoint, ROUGE-L validation, errors."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from l2c_helpers import TINY_MODEL, make_world
from precision_helpers import assert_trains_in_every_precision
from reproducible import assert_same_losses_for_the_same_seed

from vltools.cli import cli
from vltools.errors import VLToolsError
from vltools.io.checkpoints import load_checkpoint
from vltools.losses import sequence_cross_entropy
from vltools.models import model_from_checkpoint
from vltools.models.l2c import total_variation
from vltools.training import config_defaults
from vltools.training.config import build_config
from vltools.training.samplers import fetch
from vltools.training.tasks.l2c import build_task


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("l2c"))


def config(*overrides: str) -> dict:
    sets = [TINY_MODEL[i + 1] for i, a in enumerate(TINY_MODEL) if a == "--set"]
    return build_config(config_defaults("l2c"), overrides=[*sets, *overrides])


def test_defaults_are_the_papers():
    defaults = config_defaults("l2c")
    assert defaults["train"]["lr"] == 1e-4 and defaults["train"]["batch_size"] == 16
    assert defaults["task"]["aux_batch_size"] == 128 and defaults["task"]["tv_weight"] == 1.0
    assert defaults["model"]["num_nodes"] == 9 and defaults["model"]["graph_dim"] == 512
    assert defaults["model"]["hidden_size"] == 512 and defaults["model"]["node_norm"] == "sum"


def test_loss_is_l_diff_plus_l_single_plus_lambda_tv(world):
    torch.manual_seed(0)
    task = build_task("l2c", [str(world[k]) for k in ("pairs", "features", "captions", "aux_features")],
                      config("task.tv_weight=0.5"))
    batch = task.collate(fetch(task.train_data, [0, 1, 2]))
    aux = task.aux_collate(fetch(task.aux_data, [0, 3]))
    batch.update({f"aux_{k}": v for k, v in aux.items()})
    model = task.model.eval()
    with torch.no_grad():
        loss = task.loss(model, batch)
        # each part computed separately: the pairs alone, the single images alone, the pooling's TV norm
        encoder = model.encoder
        images = torch.cat([batch["featmap_a"], batch["featmap_b"], batch["aux_featmap"]])
        tv = total_variation(encoder.pool(images)).mean()   # Eq. 2 per image (not divided by H x W)
        pair_only = model(batch["featmap_a"], batch["mask_a"], batch["featmap_b"], batch["mask_b"], batch["tokens"])
        l_diff = sequence_cross_entropy(pair_only.pair_logp, batch["tokens"][:, 1:], reduction="caption")
        cond, _ = model.encode(batch["aux_featmap"][:0], batch["aux_mask"][:0], batch["aux_featmap"][:0],
                               batch["aux_mask"][:0], batch["aux_featmap"], batch["aux_mask"])
        l_single = sequence_cross_entropy(model.decoder(cond, batch["aux_tokens"]), batch["aux_tokens"][:, 1:],
                                          reduction="caption")
    torch.testing.assert_close(loss, l_diff + l_single + 0.5 * tv)


def test_train_cli_writes_the_best_checkpoint_by_rouge_l(world, tmp_path):
    out = tmp_path / "l2c.pt"
    args = ["--quiet", "train", "--model", "l2c", *(str(world[k]) for k in ("pairs", "features", "captions",
                                                                           "aux_features")),
            "-o", str(out), "--epochs", "2", "--batch-size", "4", "--lr", "1e-2", *TINY_MODEL]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    payload = load_checkpoint(out)
    assert payload["model"] == "l2c" and payload["config"]["feature_dim"] == 8
    assert payload["train_state"]["metric"] == "ROUGE_L"
    assert payload["train_state"]["inputs"]["aux_captions"] == 20
    log = [json.loads(line) for line in (tmp_path / "l2c.pt.log.jsonl").read_text().splitlines()]
    vals = [r for r in log if r["type"] == "val"]
    assert len(vals) == 2 and all(0 <= r["ROUGE_L"] <= 100 for r in vals)
    # the log rounds at output (clean numbers); the checkpoint keeps full precision
    assert max(r["ROUGE_L"] for r in vals) == pytest.approx(payload["train_state"]["best_ROUGE_L"], abs=1e-6)
    model = model_from_checkpoint(payload)
    assert not model.training and model.encoder.num_nodes == 3


def test_trains_and_validates_at_epoch_ends_without_java(world, tmp_path, monkeypatch):
    """`--val-every 0`: ROUGE-L at each epoch end, with no `java` on PATH (the references' PTB tokens from NLTK)."""
    monkeypatch.setenv("PATH", "/nonexistent")
    out = tmp_path / "l2c.pt"
    args = ["--quiet", "train", "--model", "l2c", str(world["pairs"]), str(world["features"]), "-o", str(out),
            "--epochs", "2", "--batch-size", "4", "--val-every", "0", *TINY_MODEL]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    log = [json.loads(line) for line in (tmp_path / "l2c.pt.log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log if r["type"] == "val"] == [1, 2]


def test_pairs_only_training_has_no_auxiliary_data(world):
    task = build_task("l2c", [str(world["pairs"]), str(world["features"])], config())
    assert task.aux_data is None and "captions" not in task.inputs


def test_bad_inputs_are_one_line_errors(world, tmp_path):
    with pytest.raises(VLToolsError, match="takes PAIRS.jsonl FEATS.h5"):
        build_task("l2c", [str(world["pairs"])], config())
    with pytest.raises(VLToolsError, match=r"image 's0' is not in .*pairs.h5"):
        build_task("l2c", [str(world[k]) for k in ("pairs", "features", "captions")], config())
    with pytest.raises(VLToolsError, match="no captions in split 'test'"):
        build_task("l2c", [str(world[k]) for k in ("pairs", "features", "captions", "aux_features")],
                   config("task.aux_split=test"))


def test_same_seed_same_losses_whatever_the_workers(world, tmp_path):
    inputs = [str(world[k]) for k in ("pairs", "features", "captions", "aux_features")]
    assert_same_losses_for_the_same_seed(lambda c: build_task("l2c", inputs, c), config("train.batch_size=6"),
                                         tmp_path)


def test_trains_in_every_precision(world, tmp_path):
    inputs = [str(world[k]) for k in ("pairs", "features", "captions", "aux_features")]
    assert_trains_in_every_precision(lambda c: build_task("l2c", inputs, c), config("train.batch_size=6"), tmp_path)
