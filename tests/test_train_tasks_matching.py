"""The matching task's training options: negatives, the validation limit, the vocabulary's splits, the tokenizer."""

from __future__ import annotations

import json

import pytest
import torch
from precision_helpers import assert_trains_in_every_precision
from reproducible import assert_same_losses_for_the_same_seed
from tiny_matching import make_world

from vltools.errors import VLToolsError
from vltools.io.progress import log as vltools_log
from vltools.text.tokenize import tokenizer_name
from vltools.training import config_defaults
from vltools.training.config import build_config
from vltools.training.tasks.matching import build_task


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("world"))


def task_for(world, *overrides):
    config = build_config(config_defaults("vse"), overrides=["model.embed_size=8", "model.word_dim=4", *overrides])
    return build_task("vse", [str(p) for p in world], config)


class Fixed(torch.nn.Module):
    """A "model" that returns a hand-written score matrix whatever the batch."""

    def __init__(self, sims):
        super().__init__()
        self.sims = torch.tensor(sims)

    def forward(self, regions, num_regions, tokens, lengths):
        return self.sims


# captions 0 and 1 show the same image; each is the other's hardest "negative" when only the diagonal is masked
SIMS = [[0.9, 0.8, 0.1],
        [0.8, 0.9, 0.1],
        [0.1, 0.2, 0.9]]
BATCH = {"regions": None, "num_regions": None, "tokens": None, "lengths": None,
         "image_index": torch.tensor([0, 0, 1])}


@pytest.mark.parametrize("negatives, expected", [
    # diagonal (released): image 0 vs caption 1 and image 1 vs caption 0 cost 0.2 + 0.8 - 0.9 = 0.1 each, in
    # both directions; every other hinge is negative
    ("diagonal", 0.4),
    # other_images: the same-image pairs are not negatives; the rest are beaten by more than the margin
    ("other_images", 0.0),
])
def test_negatives_option_on_a_hand_built_batch(world, negatives, expected):
    task = task_for(world, f"task.negatives={negatives}")
    assert task.loss(Fixed(SIMS), BATCH).item() == pytest.approx(expected, abs=1e-6)


def test_default_negatives_are_other_images_and_bad_values_are_refused(world):
    assert config_defaults("sgr")["task"]["negatives"] == "other_images"
    with pytest.raises(VLToolsError, match="task.negatives must be one of other_images, diagonal, not 'all'"):
        task_for(world, "task.negatives=all")


def test_val_captions_keeps_the_first_n_captions_and_their_images(world):
    full = task_for(world)
    task = task_for(world, "task.val_captions=7")
    assert len(full.val) == 100 and len(task.val) == 7
    assert task.val.caption_ids == full.val.caption_ids[:7]
    assert task.val.image_ids == full.val.image_ids[:2]
    assert task.val.caption_image_index.tolist() == [0, 0, 0, 0, 0, 1, 1]
    assert len(task.val_tokens) == 7 and task.inputs["val_captions"] == 7
    with pytest.raises(VLToolsError, match=r"task.val_captions must be in \[0, inf\), not -1"):
        task_for(world, "task.val_captions=-1")


def test_vocab_splits_train_or_train_plus_val(world, tmp_path):
    features, captions = world
    records = [json.loads(line) for line in captions.read_text(encoding="utf-8").splitlines()]
    val_image = next(r["image_id"] for r in records if r["split"] == "val")
    extra = [{"image_id": val_image, "caption": "a zebra", "split": "val"}] * 4
    with_zebra = tmp_path / "caps.jsonl"
    with_zebra.write_text("".join(json.dumps(r) + "\n" for r in records + extra), encoding="utf-8")
    base = build_config(config_defaults("vse"), overrides=["model.embed_size=8", "model.word_dim=4"])
    train_only = build_task("vse", [str(features), str(with_zebra)], base)
    both = build_task("vse", [str(features), str(with_zebra)],
                      build_config(config_defaults("vse"), overrides=["model.embed_size=8", "model.word_dim=4",
                                                                       "task.vocab_splits=train+val"]))
    assert "zebra" not in train_only.vocab.words and "zebra" in both.vocab.words
    with pytest.raises(VLToolsError, match="task.vocab_splits must be one of train, train"):
        build_task("vse", [str(features), str(with_zebra)],
                   build_config(config_defaults("vse"), overrides=["task.vocab_splits=all"]))


def test_a_vocabulary_dropping_most_training_words_is_reported_naming_the_setting(world, tmp_path, monkeypatch):
    features, captions = world
    records = [json.loads(line) for line in captions.read_text(encoding="utf-8").splitlines()]
    rare = tmp_path / "caps.jsonl"     # every caption: "a" and a word of its own
    rare.write_text("".join(json.dumps({**r, "caption": f"a w{n}"}) + "\n" for n, r in enumerate(records)),
                    encoding="utf-8")
    warnings = []
    monkeypatch.setattr(vltools_log, "warning", lambda message, *args: warnings.append(message % args))
    task = build_task("vse", [str(features), str(rare)], build_config(config_defaults("vse"), overrides=[
        "model.embed_size=8", "model.word_dim=4"]))
    assert task.vocab.words[4:] == ["a"]
    distinct = 1 + sum(r["split"] == "train" for r in records)
    assert warnings == [f"the vocabulary keeps only 1 of the {distinct} distinct words of the training captions "
                        "(those seen at least 4 times), 50% of their words: the model will read the rest as <unk>; "
                        "lower task.vocab_threshold for data this small, e.g. --set task.vocab_threshold=1 keeps 100%"]


def test_the_tokenizer_is_recorded_with_the_inputs(world):
    assert task_for(world).checkpoint_info()["inputs"]["tokenizer"] == tokenizer_name()


def test_the_features_extractor_is_recorded_with_the_inputs(world):
    """`match` warns when later features come from another extractor (vltools.infer.loader.check_features)."""
    assert task_for(world).checkpoint_info()["inputs"]["feature_extractor"] == "tiny (none), synthetic regions"


def test_same_seed_same_losses_whatever_the_workers(world, tmp_path):
    config = build_config(config_defaults("vse"), overrides=["model.embed_size=8", "model.word_dim=4",
                                                             "train.batch_size=40"])
    assert_same_losses_for_the_same_seed(lambda c: build_task("vse", [str(p) for p in world], c), config, tmp_path)


SIM = ["model.num_regions=4", "model.sim_dim=8"]


@pytest.mark.parametrize("model, sizes", [("vse", []), ("sgr", [*SIM, "model.sgr_step=1"]), ("saf", SIM)])
def test_trains_in_every_precision(world, tmp_path, model, sizes):
    config = build_config(config_defaults(model), overrides=["model.embed_size=8", "model.word_dim=4", *sizes,
                                                             "train.batch_size=40"])
    assert_trains_in_every_precision(lambda c: build_task(model, [str(p) for p in world], c), config, tmp_path)
