"""The Python API (`import vltools`): each function gives what its stage writes, through the same library code."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from matching_helpers import make_world, save_tiny
from tiny_captioning import make_caption_world, save_captioner

import vltools
from vltools.cli import cli
from vltools.errors import VLToolsError
from vltools.io.model_store import add_model
from vltools.io.numbers import dumps
from vltools.io.records import read_records
from vltools.io.sims import read_sims


def run(*args: object) -> str:
    result = CliRunner().invoke(cli, ["--quiet", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def printed(scores: dict) -> dict:
    """Scores as the stage prints them (numbers to 8 significant digits)."""
    return json.loads(dumps(scores))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("apiworld")
    features, captions = make_world(folder)
    return features, captions, save_tiny(folder / "sgr.pt", "sgr", 1), save_tiny(folder / "vse.pt", "vse", 2)


def test_importing_vltools_does_not_import_torch():
    code = "import sys, vltools; print('torch' in sys.modules, callable(vltools.match))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]


def test_match_gives_what_the_stage_writes(world, tmp_path):
    features, captions, sgr, vse = world
    found = vltools.match(features, captions, [sgr, vse], top_k=3, device="cpu")
    run("match", "--model", sgr, "--model", vse, features, captions, "--top-k", 3, "--sims", tmp_path / "s.h5",
        "-o", tmp_path / "r.jsonl", "--device", "cpu")
    written = read_sims(tmp_path / "s.h5")
    np.testing.assert_array_equal(found.sims, written.sims)
    assert (found.row_ids, found.column_ids, found.caption_image_ids) == \
        (written.image_ids, written.caption_ids, written.caption_image_ids)
    assert list(found.rankings()) == read_records(tmp_path / "r.jsonl", "rankings")
    assert found.sims.shape == (7, 21)      # the test split only: 7 images x 3 captions


def test_score_retrieval_of_matches_equals_the_stage_on_the_written_files(world, tmp_path):
    features, captions, sgr, _ = world
    found = vltools.match(features, captions, sgr, device="cpu")
    run("match", "--model", sgr, features, captions, "--sims", tmp_path / "s.h5", "-o", tmp_path / "r.jsonl",
        "--device", "cpu")
    from_stage = json.loads(run("score", "retrieval", tmp_path / "s.h5"))
    assert printed(vltools.score_retrieval(found)) == from_stage
    assert printed(vltools.score_retrieval(tmp_path / "s.h5")) == from_stage
    ranked = json.loads(run("score", "retrieval", tmp_path / "r.jsonl", "--captions", captions))
    assert printed(vltools.score_retrieval(tmp_path / "r.jsonl", captions)) == ranked
    one_fold = vltools.score_retrieval(found, protocol="coco1k", fold_size=7)
    assert printed(one_fold) == {**from_stage, "protocol": "coco1k", "fold_size": 7}


def test_reranked_matches_have_no_matrix_to_score(world):
    features, captions, sgr, vse = world
    found = vltools.match(features, captions, sgr, rerank_k=4, first_stage=vse, device="cpu")
    assert found.sims is None and len(list(found.rankings())) == 7 + 21
    with pytest.raises(VLToolsError, match="no full similarity matrix"):
        vltools.score_retrieval(found)


def test_models_by_store_name_and_loaded(world, tmp_path, monkeypatch):
    features, captions, sgr, vse = world
    monkeypatch.setenv("VLTOOLS_MODELS", str(tmp_path / "store"))
    add_model("pair", [sgr, vse])
    add_model("one", [sgr])
    by_name = vltools.match(features, captions, "pair", device="cpu")
    by_models = vltools.match(features, captions, [vltools.load_model(sgr), vltools.load_model("one").path, vse],
                              device="cpu")
    assert by_models.sims.shape == by_name.sims.shape
    np.testing.assert_allclose(by_name.sims, vltools.match(features, captions, [sgr, vse], device="cpu").sims)
    assert vltools.load_model("one").name == "sgr"
    with pytest.raises(VLToolsError, match="an ensemble of 2 checkpoints"):
        vltools.load_model("pair")
    with pytest.raises(VLToolsError, match="role 'painter'"):
        vltools.load_model(sgr, role="painter")
    with pytest.raises(VLToolsError, match="not a captioning model|captioner|caption"):
        vltools.load_model(sgr, role="captioner")


def test_errors_are_the_stage_messages(world):
    features, captions, sgr, _ = world
    with pytest.raises(VLToolsError, match="no model given"):
        vltools.match(features, captions)
    with pytest.raises(VLToolsError, match="no captions in split 'val'"):
        vltools.match(features, captions, sgr, split="val", device="cpu")
    with pytest.raises(VLToolsError, match="unknown option"):
        vltools.extract_regions(features, "x.h5", colour="red")


def test_caption_gives_what_the_stage_writes(tmp_path):
    features, captions = make_caption_world(tmp_path)
    model = save_captioner(tmp_path / "nt.pt", "neuraltalk2", captions, seed=2)   # seed 0 writes only empty captions
    found = vltools.caption(model, features, captions, split="val", beam=2, device="cpu")
    written = [json.loads(line) for line in run("caption", "--model", model, features, captions, "--split", "val",
                                                "--beam", 2, "--device", "cpu").splitlines()]
    assert found == written and len(found) == 10 and all(record["caption"] for record in found)


def test_extract_regions_writes_what_the_stage_writes(tmp_path):
    run("synth", tmp_path / "w", "--images", 10, "--pairs", 0, "--aux-images", 0, "--size", 48)
    images = tmp_path / "w" / "images.jsonl"
    common = {"regions": "boxes", "backbone": "resnet18", "weights": "none", "workers": 0, "image_size": 64,
              "dtype": "float32", "device": "cpu"}
    counts = vltools.extract_regions(images, tmp_path / "api.h5", **common)
    run("extract-regions", images, "--regions", "boxes", "--backbone", "resnet18", "--weights", "none",
        "--workers", 0, "--image-size", 64, "--dtype", "float32", "--device", "cpu", "-o", tmp_path / "cli.h5")
    assert counts == {"written": 10, "failed": 0}
    with h5py.File(tmp_path / "api.h5") as mine, h5py.File(tmp_path / "cli.h5") as theirs:
        assert sorted(mine) == sorted(theirs)
        for name in ("regions", "boxes", "num_regions"):
            np.testing.assert_array_equal(mine[name][:], theirs[name][:])
    with pytest.raises(VLToolsError, match="either --num-regions"):
        vltools.extract_regions(images, tmp_path / "bad.h5", num_regions=5, max_regions=9)
    assert not (tmp_path / "bad.h5").exists()


def test_search_queries_a_saved_index_like_match_index_file(tmp_path):
    """`vltools.search` returns the Matches of `match QUERIES --index-file`: the brute-force top-k for Flat."""
    pytest.importorskip("faiss")
    from index_helpers import save, unit

    rng = np.random.default_rng(0)
    images, captions = unit(rng.normal(size=(50, 8))), unit(rng.normal(size=(6, 8)))
    save(tmp_path / "imgs.h5", "i", images, "images")
    save(tmp_path / "caps.h5", "c", captions, "captions")
    run("index", tmp_path / "imgs.h5", "-o", tmp_path / "g.h5")
    found = vltools.search(tmp_path / "caps.h5", tmp_path / "g.h5", top_k=4)
    assert "search" in vltools.__all__ and found.direction == "t2i"
    assert (found.row_ids, found.column_ids) == ([f"c{k}" for k in range(6)], [f"i{k}" for k in range(50)])
    np.testing.assert_array_equal(found.forward[1], np.argsort(-(captions @ images.T), axis=1)[:, :4])
    assert list(found.rankings()) == [json.loads(line) for line in
                                      run("match", tmp_path / "caps.h5", "--index-file", tmp_path / "g.h5", "-k", "4")
                                      .splitlines()]
