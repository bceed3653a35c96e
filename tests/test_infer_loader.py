"""The one checkpoint loader: each stage's role accepts its models and refuses any other checkpoint in one line."""

from __future__ import annotations

import hashlib

import pytest
import torch

from vltools.errors import VLToolsError
from vltools.infer.loader import load_model, load_models
from vltools.io.checkpoints import save_checkpoint
from vltools.models import build_model
from vltools.text.vocab import SPECIALS

WORDS = [*SPECIALS, "a", "dog", "runs"]
CONFIG = {"img_dim": 8, "embed_size": 6, "word_dim": 4}


def save_vse(path, words=WORDS, config=CONFIG):
    torch.manual_seed(0)
    model = build_model("vse", config, len(words))
    save_checkpoint(path, "vse", config, model.state_dict(), vocab=words, schema=1)
    return model


def test_a_matching_checkpoint_loads_in_eval_mode_with_its_vocabulary_and_digest(tmp_path):
    saved = save_vse(tmp_path / "vse.pt")
    loaded = load_model(tmp_path / "vse.pt")
    assert loaded.name == "vse" and not loaded.model.training
    assert loaded.vocab.words == WORDS and loaded.config == CONFIG
    assert loaded.tokenize(["a dog"]) == [[1, 4, 5, 2]]
    for key, value in saved.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value)
    assert loaded.digest == hashlib.sha256((tmp_path / "vse.pt").read_bytes()).hexdigest()[:16]


@pytest.mark.parametrize(("role", "expected"), [
    ("captioner", r"vse.pt: a checkpoint of model 'vse', not a captioner; init must be one of"),
    ("l2c", r"vse.pt: a checkpoint of model 'vse'; describing pairs needs an l2c checkpoint"),
    ("concepts", r"vse.pt: is a 'vse' checkpoint, not a concept CNN"),
])
def test_other_roles_refuse_the_checkpoint_naming_file_and_role(tmp_path, role, expected):
    save_vse(tmp_path / "vse.pt")
    with pytest.raises(VLToolsError, match=expected):
        load_model(tmp_path / "vse.pt", role, "init")


def test_a_matching_checkpoint_without_vocabulary_is_refused(tmp_path):
    model = build_model("vse", CONFIG, len(WORDS))
    save_checkpoint(tmp_path / "novocab.pt", "vse", CONFIG, model.state_dict(), schema=1)
    with pytest.raises(VLToolsError, match="checkpoint has no vocabulary"):
        load_model(tmp_path / "novocab.pt")


def test_an_ensemble_must_share_vocabulary_and_feature_width(tmp_path):
    save_vse(tmp_path / "a.pt")
    save_vse(tmp_path / "b.pt", words=[*WORDS, "cat"])
    save_vse(tmp_path / "c.pt", config={**CONFIG, "img_dim": 16})
    assert len(load_models([tmp_path / "a.pt", tmp_path / "a.pt"])) == 2
    with pytest.raises(VLToolsError, match="its vocabulary differs"):
        load_models([tmp_path / "a.pt", tmp_path / "b.pt"])
    with pytest.raises(VLToolsError, match="img_dim=16 but .*a.pt has img_dim=8"):
        load_models([tmp_path / "a.pt", tmp_path / "c.pt"])
    with pytest.raises(VLToolsError, match="no model given"):
        load_models([])


def test_the_detector_role_loads_a_vocabulary_free_bottom_up_checkpoint_and_refuses_others(tmp_path):
    from test_convert_bottom_up_weights import TINY

    from vltools.models.bottom_up import BottomUpAttention

    torch.manual_seed(0)
    detector = BottomUpAttention(**TINY)
    save_checkpoint(tmp_path / "bua.pt", "bottom-up", detector.config, detector.state_dict(), schema=1)
    loaded = load_model(tmp_path / "bua.pt", "detector", "--detector-weights")
    assert loaded.name == "bottom-up" and loaded.words == [] and not loaded.model.training
    assert torch.equal(loaded.model.predictor.cls_score.weight, detector.predictor.cls_score.weight)
    save_vse(tmp_path / "vse.pt")
    with pytest.raises(VLToolsError, match=r"vse.pt: a checkpoint of 'vse', not a region detector; "
                                           r"--detector-weights needs the bottom-up-attention weights"):
        load_model(tmp_path / "vse.pt", "detector", "--detector-weights")
    with pytest.raises(VLToolsError, match="bua.pt: checkpoint has no vocabulary"):
        load_model(tmp_path / "bua.pt")


@pytest.mark.parametrize(("features_attrs", "trained", "warned"), [
    ({"extractor": "bottom-up", "weights": "0123456789abcdef"}, "bottom-up", False),
    ({"backbone": "bottom-up", "weights": "unknown"}, "bottom-up", False),   # `convert bottom-up` of the release
    ({"backbone": "resnet101", "weights": "imagenet", "regions": "detector"}, "bottom-up", True),
    ({"extractor": "bottom-up"}, "resnet101 (imagenet), detector regions", True),
    ({"backbone": "resnet101", "weights": "imagenet", "regions": "detector"}, None, False),   # not recorded
    ({"backbone": "precomp", "weights": "unknown"}, "bottom-up", False),   # imported: unknown extractor
])
def test_match_warns_in_one_line_when_the_features_extractor_is_not_the_trained_one(tmp_path, caplog,
                                                                                     features_attrs, trained, warned):
    import logging

    import numpy as np

    from vltools.infer.loader import check_features
    from vltools.io.features import FeaturesReader, FeaturesWriter

    with FeaturesWriter(tmp_path / "feats.h5", features_attrs, dtype="float32") as writer:
        writer.add(["a"], regions=np.ones((1, 3, CONFIG["img_dim"]), np.float32))
    model = build_model("vse", CONFIG, len(WORDS))
    train_state = {"inputs": {"feature_extractor": trained}} if trained else {}
    save_checkpoint(tmp_path / "vse.pt", "vse", CONFIG, model.state_dict(), vocab=WORDS, train_state=train_state,
                    schema=1)
    with FeaturesReader(tmp_path / "feats.h5") as reader, caplog.at_level(logging.WARNING, logger="vltools"):
        check_features(reader, [load_model(tmp_path / "vse.pt")])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == int(warned)
    if warned:
        assert "feats.h5: features from" in lines[0] and f"vse.pt was trained on {trained} features" in lines[0]
        assert "\n" not in lines[0]


@pytest.mark.parametrize(("features_attrs", "count", "expected"), [
    ({"regions": "grid", "image_size": 448, "stride": 32}, 36,
     ["--image-size 192 (a 6 x 6 grid at stride 32)", "--regions bottom-up --num-regions 36"]),
    ({"regions": "grid", "image_size": 64, "stride": 16}, 49,
     ["--image-size 112 (a 7 x 7 grid at stride 16)", "--regions bottom-up --num-regions 49"]),
    ({"regions": "grid", "image_size": 448, "stride": 32}, 50, ["--regions bottom-up --num-regions 50"]),  # no grid
    ({"regions": "detector", "num_regions": "10-100 at score >= 0.2"}, 36,
     ["--num-regions 36", "--regions bottom-up --num-regions 36"]),
    ({"extractor": "bottom-up", "regions": "bottom-up", "num_regions": "10-100"}, 36,
     ["--regions bottom-up --num-regions 36"]),
    ({}, 36, ["--regions bottom-up --num-regions 36"]),   # imported features: nothing recorded
])
def test_region_options_are_the_extract_regions_options_that_give_the_count(features_attrs, count, expected):
    from vltools.infer.loader import region_options

    assert region_options(features_attrs, count) == expected


def _sgr(path, num_regions, img_dim=8, train_state=None):
    config = {"img_dim": img_dim, "embed_size": 8, "word_dim": 4, "sim_dim": 4, "num_regions": num_regions,
              "sgr_step": 1}
    save_checkpoint(path, "sgr", config, build_model("sgr", config, len(WORDS)).state_dict(), vocab=WORDS,
                    train_state=train_state or {}, schema=1)
    return load_model(path)


def test_a_region_count_or_width_the_model_was_not_built_for_is_one_line_naming_the_options(tmp_path):
    import numpy as np

    from vltools.infer.loader import check_features
    from vltools.io.features import FeaturesReader, FeaturesWriter

    attrs = {"backbone": "resnet18", "weights": "imagenet", "regions": "grid", "image_size": 96, "stride": 32}
    with FeaturesWriter(tmp_path / "grid.h5", attrs, dtype="float32") as writer:
        writer.add(["a"], regions=np.ones((1, 9, 8), np.float32))    # 3 x 3 cells
    with FeaturesReader(tmp_path / "grid.h5") as reader:
        check_features(reader, [_sgr(tmp_path / "nine.pt", 9)])
        with pytest.raises(VLToolsError) as error:
            check_features(reader, [_sgr(tmp_path / "nine.pt", 9), _sgr(tmp_path / "four.pt", 4)])
        assert str(error.value) == (
            f"{tmp_path / 'grid.h5'}: the images have 9 regions each (a 3 x 3 grid of --image-size 96) but "
            f"{tmp_path / 'four.pt'} was built for num_regions=4; extract them again with --image-size 64 (a 2 x 2 "
            "grid at stride 32) or --regions bottom-up --num-regions 4, or train a model on these features")
        with pytest.raises(VLToolsError, match=r"grid.h5: regions are 8-d but .*wide.pt was trained on 16-d features "
                                               r"of bottom-up; use features from the same extractor"):
            check_features(reader, [_sgr(tmp_path / "wide.pt", 9, 16, {"inputs": {"feature_extractor": "bottom-up"}})])
