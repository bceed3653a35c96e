"""`vltools models` and `match --model NAME`: a stored ensemble matches exactly as its checkpoints given by path."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from matching_helpers import TINY, VOCAB, fails, make_world, save_tiny

from vltools.cli import cli
from vltools.io.checkpoints import save_checkpoint
from vltools.io.model_store import ENV
from vltools.io.sims import read_sims
from vltools.models import build_model


@pytest.fixture()
def world(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "store"))
    features, captions = make_world(tmp_path, n_images=4, per_image=2)
    models = {name: save_tiny(tmp_path / f"{name}.pt", name, seed) for seed, name in enumerate(["sgr", "saf"])}
    return tmp_path, features, captions, models


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["--quiet", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_add_list_match_by_name_remove(world):
    folder, features, captions, models = world
    run("models", "add", "sgraf", str(models["sgr"]), str(models["saf"]))
    run("models", "add", "sgr", str(models["sgr"]))
    assert run("models", "list").splitlines() == [f"sgr\t{models['sgr']}", f"sgraf\t{models['sgr']} + {models['saf']}"]
    run("match", "--model", "sgraf", str(features), str(captions), "--sims", str(folder / "named.h5"), "-o",
        str(folder / "named.jsonl"))
    run("match", "--model", str(models["sgr"]), "--model", str(models["saf"]), str(features), str(captions),
        "--sims", str(folder / "paths.h5"), "-o", str(folder / "paths.jsonl"))
    assert (read_sims(folder / "named.h5").sims == read_sims(folder / "paths.h5").sims).all()
    assert (folder / "named.jsonl").read_text() == (folder / "paths.jsonl").read_text()
    run("models", "remove", "sgr")
    assert run("models", "list").splitlines() == [f"sgraf\t{models['sgr']} + {models['saf']}"]


def test_bad_inputs_exit_1_with_one_line(world, capsys):
    folder, features, captions, models = world
    run("models", "add", "sgraf", str(models["sgr"]), str(models["saf"]))
    err = fails(capsys, "match", "--model", "sgraff", str(features), str(captions))
    assert "sgraff: neither a checkpoint file nor a model in the store" in err and "registered: sgraf" in err
    assert len(err.strip().splitlines()) == 1
    err = fails(capsys, "match", "--model", str(folder), str(features), str(captions))
    assert "is a directory; give a checkpoint file or a model name" in err
    # an ensemble whose members read other region features (here: 8 regions instead of 4)
    other = build_model("saf", {**TINY["saf"], "num_regions": 8}, len(VOCAB))
    save_checkpoint(folder / "saf8.pt", "saf", {**TINY["saf"], "num_regions": 8}, other.state_dict(), vocab=VOCAB,
                    schema=1)
    err = fails(capsys, "models", "add", "mixed", str(models["sgr"]), str(folder / "saf8.pt"))
    assert "num_regions=8 but" in err and "must read the same region features" in err
    # a store entry whose checkpoint was deleted
    models["saf"].unlink()
    err = fails(capsys, "match", "--model", "sgraf", str(features), str(captions))
    assert "checkpoint of the stored model 'sgraf' is missing" in err
    err = fails(capsys, "models", "remove", "nothing")
    assert "nothing: not in the model store" in err
    assert json.loads((folder / "store/models.json").read_text()).keys() == {"sgraf"}


def test_a_store_index_of_wrong_types_is_one_line_in_list_and_remove(tmp_path, monkeypatch, capsys):
    """{"x": {"members": [1, null]}} once gave a TypeError traceback in `models list`."""
    monkeypatch.setenv(ENV, str(tmp_path / "store"))
    index = tmp_path / "store" / "models.json"
    index.parent.mkdir()
    index.write_text('{"x": {"members": [1, null]}}', encoding="utf-8")
    for args in (["models", "list"], ["models", "remove", "x"]):    # match --model x: test_io_model_store
        err = fails(capsys, *args)
        assert err.strip().splitlines() == [
            f"vltools: error: {index}: the model store's index entry 'x': \"members\" must be a non-empty list of "
            f"checkpoint paths, found [1, null]; fix that entry, or delete {index} and add the models again with "
            "`vltools models add`"]
