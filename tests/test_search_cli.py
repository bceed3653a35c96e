"""`vltools search` and `vltools.search(..., model=)`: query texts typed or piped in, encoded by a VSE trained here on
the tiny matching world, find their images in a saved index or an embeddings file far above chance; query images
(rmac) find themselves; a bad query, a model that cannot encode texts alone, or images another checkpoint encoded
are one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from matching_helpers import fails, save_tiny
from PIL import Image
from tiny_matching import TINY, make_world

import vltools
from vltools.cli import cli
from vltools.errors import VLToolsError
from vltools.io.checkpoints import save_checkpoint
from vltools.io.records import read_records
from vltools.models import build_model

pytest.importorskip("faiss")


def run(*args: object, stdin: str | None = None) -> list[dict]:
    result = CliRunner().invoke(cli, ["--quiet", *map(str, args)], input=stdin, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A VSE trained 20 epochs on the 25 training images (about 7 s), the embeddings of all 45 images and their
    Flat index; the first caption of each of the 20 validation images (concept pairs it never trained on)."""
    folder = tmp_path_factory.mktemp("search")
    features, captions = make_world(folder)
    run("train", "--model", "vse", features, captions, *TINY, "--epochs", 20, "--batch-size", 16, "--lr", "2e-3",
        "--seed", 0, "--device", "cpu", "-o", folder / "vse.pt")
    run("encode", features, "--model", folder / "vse.pt", "-o", folder / "images.h5")
    run("index", folder / "images.h5", "-o", folder / "images.index.h5")
    val = [r for r in read_records(captions, "captions") if r["split"] == "val" and r["caption_id"].endswith("_0")]
    return folder, val


def test_a_caption_finds_its_image_far_above_chance_in_an_index_and_in_embeddings(world):
    folder, val = world
    queries = [word for record in val for word in ("--query", record["caption"])]
    found = run("search", folder / "images.index.h5", "--model", folder / "vse.pt", *queries, "-k", 5)
    assert [r["query"] for r in found] == [r["caption"] for r in val]
    assert {r["direction"] for r in found} == {"t2i"} and all(len(r["ids"]) == 5 for r in found)
    hits = sum(record["image_id"] in ranked["ids"] for record, ranked in zip(val, found, strict=True))
    assert hits >= 10, hits       # chance: 5 of 45 images, about 2 of the 20
    exact = run("search", folder / "images.h5", "--model", folder / "vse.pt", *queries, "-k", 5)
    assert [r["ids"] for r in exact] == [r["ids"] for r in found]
    for mine, theirs in zip(exact, found, strict=True):
        np.testing.assert_allclose(mine["scores"], theirs["scores"], rtol=1e-5, atol=1e-6)


def test_queries_piped_one_a_line_follow_the_typed_ones(world, tmp_path):
    folder, val = world
    texts = [r["caption"] for r in val[:4]]
    piped = run("search", folder / "images.index.h5", "--model", folder / "vse.pt", "--query", texts[0],
                "--query-file", "-", "-k", 3, stdin=f"{texts[1]}\n\n  {texts[2]}  \n{texts[3]}")
    typed = run("search", folder / "images.index.h5", "--model", folder / "vse.pt", "-k", 3,
                *[word for text in texts for word in ("-q", text)])
    assert [r["query"] for r in piped] == texts and piped == typed
    (tmp_path / "queries.txt").write_text("\n".join(texts) + "\n")
    assert run("search", folder / "images.index.h5", "--model", folder / "vse.pt", "-k", 3, "--query-file",
               tmp_path / "queries.txt") == typed


def test_the_api_gives_the_stage_s_rankings(world):
    folder, val = world
    texts = [r["caption"] for r in val[:3]]
    found = vltools.search(texts, folder / "images.index.h5", top_k=4, model=folder / "vse.pt", device="cpu")
    stage = run("search", folder / "images.index.h5", "--model", folder / "vse.pt", "-k", 4,
                *[word for text in texts for word in ("-q", text)])
    assert list(found.rankings()) == stage
    assert repr(found) == "Matches(t2i, 3 captions x 45 images, top 4, no sims)"    # once "3 images x 45 captions"
    one = vltools.search(texts[0], folder / "images.h5", top_k=4, model=vltools.load_model(folder / "vse.pt",
                                                                                           "encodable"))
    assert [r["ids"] for r in one.rankings()] == [stage[0]["ids"]]


def one_line(err: str, expected: str) -> None:
    assert len(err.strip().splitlines()) == 1 and expected in err, err


@pytest.mark.parametrize(("queries", "expected"), [
    (["a red cube", " "], "query 2 of 2 is empty; give one line of text a query"),
    (["a\tb"], "query 1 of 1 ('a\\tb') holds the control character '\\t'"),
], ids=["empty", "control-character"])
def test_a_bad_query_is_one_line_before_the_model_is_checked(world, tmp_path, capsys, queries, expected):
    folder, _ = world
    sgr = save_tiny(tmp_path / "sgr.pt", "sgr")     # refused too, once loaded
    err = fails(capsys, "search", str(folder / "images.index.h5"), "--model", str(sgr),
                *[word for query in queries for word in ("--query", query)])
    one_line(err, expected)


def test_no_query_is_a_usage_error(world):
    folder, _ = world
    result = CliRunner().invoke(cli, ["search", str(folder / "images.index.h5"), "--model", str(folder / "vse.pt")])
    assert result.exit_code == 2 and "no query given; give --query TEXT" in result.output


def test_models_and_targets_that_do_not_fit_are_one_line(world, tmp_path, capsys):
    folder, val = world
    query = ["--query", val[0]["caption"], "-o", str(tmp_path / "out.jsonl")]
    sgr = save_tiny(tmp_path / "sgr.pt", "sgr")
    one_line(fails(capsys, "search", str(folder / "images.h5"), "--model", str(sgr), *query),
             "is a cross-attention model")
    other = save_tiny(tmp_path / "other.pt", "vse")
    err = fails(capsys, "search", str(folder / "images.index.h5"), "--model", str(other), *query)
    one_line(err, f"--model {other}: another checkpoint (")
    assert f"than the one that encoded the embeddings of {folder / 'images.index.h5'} (" in err
    run("encode", folder / "caps.jsonl", "--model", folder / "vse.pt", "--split", "val", "-o", tmp_path / "caps.h5")
    one_line(fails(capsys, "search", str(tmp_path / "caps.h5"), "--model", str(folder / "vse.pt"), *query),
             "caps.h5: holds captions embeddings; queries search images")
    one_line(fails(capsys, "search", str(folder / "feats.h5"), "--model", str(folder / "vse.pt"), *query),
             "feats.h5: INDEX.h5|IMG_EMB.h5 takes a vltools index or embeddings file, but this is a vltools features "
             "file")
    assert not (tmp_path / "out.jsonl").exists()
    with pytest.raises(VLToolsError, match="another checkpoint"):
        vltools.search("a red cube", folder / "images.h5", model=other)


def test_an_api_query_that_is_no_text_is_named_shortly(world):
    folder, _ = world
    with pytest.raises(VLToolsError) as error:
        vltools.search([{"caption": "a red cube " * 1000}] * 5000, folder / "images.h5", model=folder / "vse.pt")
    assert str(error.value).startswith("queries must be a query (a text or an image path) or a non-empty list of "
                                       "them, not a list of 5000 items, [{'caption': ")
    assert len(str(error.value)) < 300
    with pytest.raises(VLToolsError, match=r"^queries is a list \(\['a red cube'\]\): query texts and images are "
                                           "encoded by model=CHECKPOINT, the one that encoded index_file$"):
        vltools.search(["a red cube"], folder / "images.h5")


def test_query_images_find_themselves_with_an_rmac_model(tmp_path):
    rng = np.random.default_rng(0)
    with open(tmp_path / "images.jsonl", "w") as images:
        for i in range(5):
            Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
            images.write(json.dumps({"image_id": f"im{i}", "path": f"{i}.png"}) + "\n")
    torch.manual_seed(0)
    config = {"backbone": "resnet18", "levels": 2, "scales": "1.0", "text": False, "frozen_bn": True}
    model = build_model("rmac", config, 2).eval()
    save_checkpoint(tmp_path / "rmac.pt", "rmac", config, model.state_dict(), vocab=["red", "dog"],
                    train_state={"config": {"task": {"image_size": 32}}}, schema=1)
    run("encode", tmp_path / "images.jsonl", "--model", tmp_path / "rmac.pt", "--device", "cpu", "-o",
        tmp_path / "db.h5")
    shutil.copy(tmp_path / "3.png", tmp_path / "query.png")
    found = run("search", tmp_path / "db.h5", "--model", tmp_path / "rmac.pt", "--query", tmp_path / "query.png",
                "--query", tmp_path / "1.png", "-k", 2)
    assert [(r["query"], r["direction"], r["ids"][0]) for r in found] == [("query.png", "i2i", "im3"),
                                                                        ("1.png", "i2i", "im1")]
    assert [r["scores"][0] for r in found] == pytest.approx([1.0, 1.0], abs=1e-5)
    assert all(r["scores"][1] < 0.999 for r in found)
