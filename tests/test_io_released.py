"""The table of released models: the names the issue asked for, each with its exact command, and the one-sentence
hint that every missing-model error ends with."""

from __future__ import annotations

import pytest

from vltools.io.released import RELEASED, how_to_get, registered_by

EXPECTED = {
    "sgraf": ("model", "bin/fetch_sgraf_models.sh --only f30k", "about 140 MB"),
    "sgraf-f30k": ("model", "bin/fetch_sgraf_models.sh --only f30k", "about 140 MB"),
    "sgr-f30k": ("model", "bin/fetch_sgraf_models.sh --only f30k", "about 140 MB"),
    "saf-f30k": ("model", "bin/fetch_sgraf_models.sh --only f30k", "about 140 MB"),
    "sgraf-coco": ("model", "bin/fetch_sgraf_models.sh --only coco", "about 150 MB"),
    "sgr-coco": ("model", "bin/fetch_sgraf_models.sh --only coco", "about 150 MB"),
    "saf-coco": ("model", "bin/fetch_sgraf_models.sh --only coco", "about 150 MB"),
    "bottom-up-k36": ("detector_weights", "bin/fetch_bottom_up_weights.sh --fixed36", "about 260 MB"),
    "bottom-up": ("detector_weights", "bin/fetch_bottom_up_weights.sh", "about 260 MB"),
}


def test_every_released_model_with_its_option_command_and_size():
    assert {name: (m.option, m.download.command, m.download.size()) for name, m in RELEASED.items()} == EXPECTED
    for model in RELEASED.values():
        assert "https://" in model.download.source and model.download.needs


def test_a_released_name_gets_its_own_command_and_size():
    assert how_to_get("saf-coco", "model") == (
        "saf-coco is the released SAF trained on MS-COCO: run `bin/fetch_sgraf_models.sh --only coco` in the vltools "
        "source tree (it downloads about 150 MB, converts and registers it)")


def test_a_released_name_given_to_the_other_option_says_which_option_takes_it():
    hint = how_to_get("bottom-up-k36", "model")
    assert "(it is for detector_weights, not model)" in hint
    assert "run `bin/fetch_bottom_up_weights.sh --fixed36` in" in hint


@pytest.mark.parametrize("option, expected", [
    ("model", "released models for model: sgraf, sgraf-f30k, sgr-f30k, saf-f30k (`bin/fetch_sgraf_models.sh --only "
                "f30k`, about 140 MB), sgraf-coco, sgr-coco, saf-coco (`bin/fetch_sgraf_models.sh --only coco`, "
                "about 150 MB), each command run in the vltools source tree"),
    ("detector_weights", "released models for detector_weights: bottom-up-k36 (`bin/fetch_bottom_up_weights.sh "
                           "--fixed36`, about 260 MB), bottom-up (`bin/fetch_bottom_up_weights.sh`, about 260 MB)"),
])
def test_an_unknown_name_gets_the_commands_of_the_released_models_of_its_option(option, expected):
    hint = how_to_get("my-typo", option)
    assert hint.startswith(expected) and hint.endswith("or register your own checkpoints with `vltools models add "
                                                       "NAME CKPT...`")


def test_an_option_without_released_models_points_to_models_add():
    assert how_to_get("vse-f30k", "--first-stage") == \
        "register your own checkpoints with `vltools models add NAME CKPT...`"


def test_registered_by_lists_each_command_with_the_names_it_registers():
    assert registered_by("detector_weights") == (
        "bin/fetch_bottom_up_weights.sh --fixed36 (bottom-up-k36), bin/fetch_bottom_up_weights.sh (bottom-up)")
    assert registered_by("model").startswith("bin/fetch_sgraf_models.sh --only f30k (sgraf, sgraf-f30k, sgr-f30k, ")


def test_registered_by_refuses_an_option_spelled_otherwise_than_the_table():
    """The help once compared with "--detector-weights" and ended 'the released detectors are registered by .'."""
    with pytest.raises(ValueError, match="no released model is for '--detector-weights'"):
        registered_by("--detector-weights")
