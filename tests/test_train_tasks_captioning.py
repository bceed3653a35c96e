"""The captioning task: CL / CL(P) / CL(N) / IL losses of real batches against a pair-by-pair direct computation,
section 4.3's non-zero gradient, validation, and the one-line errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from precision_helpers import assert_trains_in_every_precision
from reproducible import assert_same_losses_for_the_same_seed
from tiny_captioning import PREP, SIZES, make_caption_world, save_captioner

from vltools.data.captioning import image_tensors
from vltools.errors import VLToolsError
from vltools.io.checkpoints import load_checkpoint, save_checkpoint
from vltools.io.features import FeaturesReader
from vltools.io.records import read_records, write_records
from vltools.models import build_model
from vltools.training import config_defaults
from vltools.training.config import build_config
from vltools.training.tasks.captioning import build_task

AA = "adaptive-attention"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("capworld")
    features, captions = make_caption_world(folder)
    return folder, features, captions, save_captioner(folder / "ref.pt", AA, captions, seed=1), \
        save_captioner(folder / "init.pt", AA, captions, seed=2)


def config_for(world, objective: str, model: str = AA, **options) -> dict:
    folder, features, captions, ref, init = world
    values = {"task.objective": objective, "task.negatives": 3, **{f"task.{k}": v for k, v in PREP.items()}}
    if objective.startswith("cl"):
        values.update({"task.reference": str(ref), "task.init": str(init)})
    values.update(options)
    return build_config(config_defaults(model), options=values)


def task_for(world, objective: str, model: str = AA, **options):
    _, features, captions, _, _ = world
    return build_task(model, [str(features), str(captions)], config_for(world, objective, model, **options))


def pair_logp(model, image: dict, tokens: list[int]) -> float:
    """ln p(c | I) of one caption under one image: one decoder run, the target token's log-prob summed by hand."""
    feats = image_tensors({k: np.asarray(v)[None] for k, v in image.items()})
    out = model(feats, torch.tensor([tokens]))[0]
    return sum(float(out[t, tokens[t + 1]]) for t in range(len(tokens) - 1))   # the words and <end>


def direct_j(pos_m, pos_n, neg_m, neg_n, positive=True, negative=True):
    """Eqs. (7)-(10) with nu = 1 on Python floats."""
    def h(a, b):
        return 1.0 / (1.0 + math.exp(-(a - b)))

    total = 0.0
    for k in range(len(neg_m)):
        if positive:
            total += sum(math.log(h(a, b)) for a, b in zip(pos_m, pos_n, strict=True))
        if negative:
            total += sum(math.log(1.0 - h(a, b)) for a, b in zip(neg_m[k], neg_n[k], strict=True))
    return total / len(neg_m) / len(pos_m)


@pytest.mark.parametrize("objective", ["cl", "cl-p", "cl-n"])
@torch.no_grad()
def test_cl_losses_equal_the_equations_pair_by_pair(world, objective):
    task = task_for(world, objective)
    task.model.eval()
    torch.manual_seed(0)
    items = task.train_data.__getitems__([0, 6, 13, 40])
    loss = task.loss(task.model, task.collate(items))
    target, reference = task.model, task.reference
    pos_m = [pair_logp(target, it["image"], it["tokens"]) for it in items]
    pos_n = [pair_logp(reference, it["image"], it["tokens"]) for it in items]
    neg_m = [[pair_logp(target, it["image"], it["negatives"][k]) for it in items] for k in range(3)]
    neg_n = [[pair_logp(reference, it["image"], it["negatives"][k]) for it in items] for k in range(3)]
    expected = direct_j(pos_m, pos_n, neg_m, neg_n, objective != "cl-n", objective != "cl-p")
    assert -loss.item() == pytest.approx(expected, rel=1e-4)


@torch.no_grad()
def test_il_loss_compares_each_caption_under_its_image_and_a_fixed_other_image(world):
    task = task_for(world, "il", **{"task.init": str(world[4])})
    task.model.eval()
    items = task.train_data.__getitems__([1, 2, 30])
    again = task.train_data.__getitems__([1, 2, 30])
    for a, b in zip(items, again, strict=True):
        assert np.array_equal(a["mismatch"]["regions"], b["mismatch"]["regions"])
    loss = task.loss(task.model, task.collate(items))
    gaps = [pair_logp(task.model, it["image"], it["tokens"]) - pair_logp(task.model, it["mismatch"], it["tokens"])
            for it in items]
    assert -loss.item() == pytest.approx(np.mean([math.log(1 / (1 + math.exp(-g))) for g in gaps]), rel=1e-4)


def test_cl_gradient_is_not_zero_when_target_equals_reference(world):
    task = task_for(world, "cl", **{"task.init": str(world[3])})   # target starts as the reference itself
    task.model.eval()
    torch.manual_seed(0)
    loss = task.loss(task.model, task.collate(task.train_data.__getitems__(list(range(8)))))
    assert loss.item() == pytest.approx(-2 * math.log(0.5), rel=1e-5)     # G = 0: h = 1/2 for every pair
    loss.backward()
    norm = sum(float(p.grad.norm()) ** 2 for p in task.model.parameters() if p.grad is not None) ** 0.5
    assert norm > 1e-3
    assert all(p.grad is None for p in task.reference.parameters())


def test_mle_loss_and_validation(world):
    task = task_for(world, "mle", model="neuraltalk2")
    batch = task.collate(task.train_data.__getitems__([0, 1, 2]))
    assert set(batch) == {"image.global", "tokens", "image_rows"}
    assert task.loss(task.model, batch).item() == pytest.approx(math.log(len(task.vocab)), rel=0.3)
    task.model.eval()
    with torch.no_grad():
        metrics = task.validate(task.model, torch.device("cpu"))
    assert set(metrics) == {"CIDEr"} and metrics["CIDEr"] >= 0


def test_the_feature_standardisation_is_measured_on_the_training_images_or_kept_from_init(world, tmp_path):
    _, features, captions, _, init = world
    train_ids = sorted({r["image_id"] for r in read_records(captions, "captions") if r["split"] == "train"})
    with FeaturesReader(features) as reader:
        rows = torch.from_numpy(reader.read(train_ids, ["global"])["global"]).double()
    model = task_for(world, "mle", model="neuraltalk2").model
    torch.testing.assert_close(model.norm.mean.double(), rows.mean(0), rtol=0, atol=1e-5)
    torch.testing.assert_close(model.norm.scale.double(), rows.std(0, unbiased=False), rtol=1e-4, atol=1e-6)
    payload = load_checkpoint(init)
    payload["state_dict"]["norm.mean"] = torch.full_like(payload["state_dict"]["norm.mean"], 7.0)
    save_checkpoint(tmp_path / "init7.pt", AA, payload["config"], payload["state_dict"], vocab=payload["vocab"],
                    train_state=payload["train_state"], schema=payload["schema"])
    task = task_for(world, "il", **{"task.init": str(tmp_path / "init7.pt")})
    assert torch.equal(task.model.norm.mean, torch.full_like(task.model.norm.mean, 7.0))   # not measured again


def test_a_target_from_a_checkpoint_before_feature_norm_keeps_raw_features(world, tmp_path):
    _, _, captions, ref, _ = world
    config = {**SIZES[AA], "img_dim": 16}
    words = load_checkpoint(ref)["vocab"]
    old = build_model(AA, {**config, "feature_norm": "none"}, len(words))
    save_checkpoint(tmp_path / "old.pt", AA, config, old.state_dict(), vocab=words,
                    train_state={"config": {"task": dict(PREP)}}, schema=1)
    task = task_for(world, "cl", **{"task.init": str(tmp_path / "old.pt")})
    assert isinstance(task.model.norm, torch.nn.Identity)
    assert task.checkpoint_info()["config"]["feature_norm"] == "none"


def test_bad_inputs(world, tmp_path):
    folder, features, captions, ref, init = world
    with pytest.raises(VLToolsError, match="needs --reference"):
        task_for(world, "cl", **{"task.reference": ""})
    with pytest.raises(VLToolsError, match="unknown objective"):
        task_for(world, "mmi")
    save_checkpoint(tmp_path / "vse.pt", "vse", {}, {}, vocab=["<pad>", "<start>", "<end>", "<unk>"], schema=1)
    with pytest.raises(VLToolsError, match="not a captioner"):
        task_for(world, "cl", **{"task.reference": str(tmp_path / "vse.pt")})
    other = tmp_path / "other.jsonl"
    write_records(other, [{**r, "caption": r["caption"] + " zebra"} for r in read_records(captions, "captions")])
    with pytest.raises(VLToolsError, match="same vocabulary"):
        task_for(world, "cl", **{"task.reference": str(save_captioner(tmp_path / "o.pt", AA, other))})
    from tiny_matching import make_world
    regions_only, _ = make_world(tmp_path)
    config = build_config(config_defaults("neuraltalk2"))
    with pytest.raises(VLToolsError, match="no /global dataset"):
        build_task("neuraltalk2", [str(regions_only), str(captions)], config)


def test_train_cli_writes_a_captioner_checkpoint_and_rejects_captioning_options_elsewhere(world, tmp_path):
    from click.testing import CliRunner
    from tiny_captioning import TINY

    from vltools.cli import cli

    folder, features, captions, ref, init = world
    args = ["--quiet", "train", "--model", "neuraltalk2", *TINY["neuraltalk2"], "--epochs", "1", "--batch-size", "25",
            "--set", "task.min_count=1", "--set", "task.max_words=8", "--device", "cpu", str(features), str(captions),
            "-o", str(tmp_path / "nt.pt")]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    payload = load_checkpoint(tmp_path / "nt.pt")
    assert payload["model"] == "neuraltalk2" and payload["vocab"][:4] == ["<pad>", "<start>", "<end>", "<unk>"]
    assert payload["train_state"]["metric"] == "CIDEr"
    assert payload["train_state"]["config"]["task"]["max_words"] == 8
    result = CliRunner().invoke(cli, ["train", "--model", "vse", "--reference", str(ref), str(features),
                                      str(captions), "-o", str(tmp_path / "v.pt")])
    assert result.exit_code == 2 and "--reference is not an option of --model vse" in result.output


def test_val_every_0_validates_at_each_epoch_end_without_java(world, tmp_path, monkeypatch):
    """`--val-every 0` validates at epoch ends only; a captioner's CIDEr validation runs with no `java` on PATH."""
    from click.testing import CliRunner
    from tiny_captioning import TINY

    from vltools.cli import cli

    _, features, captions, _, _ = world
    monkeypatch.setenv("PATH", "/nonexistent")
    out = tmp_path / "nt.pt"
    args = ["--quiet", "train", "--model", "neuraltalk2", *TINY["neuraltalk2"], "--epochs", "2", "--batch-size", "25",
            "--val-every", "0", "--set", "task.min_count=1", "--device", "cpu", str(features), str(captions),
            "-o", str(out)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    log = [json.loads(line) for line in (tmp_path / "nt.pt.log.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["iteration"]) for r in log if r["type"] == "val"] == [(1, 4), (2, 8)]


@pytest.mark.parametrize("objective", ["mle", "cl", "il"])
def test_same_seed_same_losses_whatever_the_workers(world, tmp_path, objective):
    """CL's negative captions are drawn while the data is fetched (in DataLoader workers, when there are any):
    from the seed and the epoch, they are the same with or without workers."""
    _, features, captions, _, _ = world
    init = {} if objective == "cl" else {"task.init": str(world[4])}  # the tiny captioner (CL's default init)
    config = config_for(world, objective, **{"train.batch_size": 25, "task.val_images": 2, **init})
    assert_same_losses_for_the_same_seed(lambda c: build_task(AA, [str(features), str(captions)], c), config,
                                         tmp_path)


@pytest.mark.parametrize("model", ["neuraltalk2", AA])
def test_trains_in_every_precision(world, tmp_path, model):
    _, features, captions, _, _ = world
    sizes = {f"model.{key}": value for key, value in SIZES[model].items()}
    config = config_for(world, "mle", model, **{"train.batch_size": 25, "task.val_images": 2, **sizes})
    assert_trains_in_every_precision(lambda c: build_task(model, [str(features), str(captions)], c), config,
                                     tmp_path)
