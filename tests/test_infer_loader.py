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
    save_checkpoint(path, "vse", config, model.state_dict(), vocab=words)
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
    ("captioner", r"vse.pt: a checkpoint of model 'vse', not a captioner; --init must be one of"),
    ("l2c", r"vse.pt: a checkpoint of model 'vse'; describing pairs needs an l2c checkpoint"),
    ("concepts", r"vse.pt: is a 'vse' checkpoint, not a concept CNN"),
])
def test_other_roles_refuse_the_checkpoint_naming_file_and_role(tmp_path, role, expected):
    save_vse(tmp_path / "vse.pt")
    with pytest.raises(VLToolsError, match=expected):
        load_model(tmp_path / "vse.pt", role, "--init")


def test_a_matching_checkpoint_without_vocabulary_is_refused(tmp_path):
    model = build_model("vse", CONFIG, len(WORDS))
    save_checkpoint(tmp_path / "novocab.pt", "vse", CONFIG, model.state_dict())
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
