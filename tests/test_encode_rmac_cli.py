"""`vltools encode` with an rmac checkpoint (database images, image + text queries, text modifiers) and
`vltools match` over two image embeddings files (i2i), against the model called directly."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from kill_helpers import interrupted_then_resumed
from matching_helpers import fails
from PIL import Image

import vltools.infer.encode as encode_step
from vltools.cli import cli
from vltools.io.checkpoints import save_checkpoint
from vltools.io.hdf5 import decode_strings
from vltools.io.proxy import read_proxy_file
from vltools.models import build_model

CAPTIONS = ["a red dog", "a blue cat", "a red cat", "a green tree", "a blue dog", "a green dog"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rmac")
    rng = np.random.default_rng(0)
    with open(folder / "images.jsonl", "w") as images, open(folder / "caps.jsonl", "w") as caps:
        for i, caption in enumerate(CAPTIONS):
            split = "train" if i < 2 else "test"
            Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(folder / f"{i}.png")
            images.write(json.dumps({"image_id": f"im{i}", "path": f"{i}.png", "split": split}) + "\n")
            caps.write(json.dumps({"image_id": f"im{i}", "caption": caption, "split": split}) + "\n")
    run("tfidf-proxy", str(folder / "caps.jsonl"), "--images", str(folder / "images.jsonl"), "--k", "2",
        "-o", str(folder / "proxy.h5"))
    proxy = read_proxy_file(folder / "proxy.h5")
    torch.manual_seed(0)
    config = {"backbone": "resnet18", "levels": 3, "scales": "1.0", "text": True, "frozen_bn": True}
    model = build_model("rmac", config, len(proxy.vocab)).eval()
    save_checkpoint(folder / "rmac.pt", "rmac", config, model.state_dict(), vocab=proxy.vocab,
                    train_state={"config": {"task": {"image_size": 32}}}, schema=1)
    return folder, model, proxy


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["--quiet", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def read(path):
    with h5py.File(path) as handle:
        return decode_strings(handle["ids"][()]), handle["emb"][()]


def direct(folder, model, ids):
    """phi of each image resized to a longest side of 32 (48 x 40 -> 32 x 27), one at a time."""
    out = []
    for image_id in ids:
        image = Image.open(folder / f"{image_id[2:]}.png").convert("RGB").resize((32, 27), Image.BILINEAR)
        tensor = torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)[None]
        with torch.no_grad():
            out.append(model.encode_images(tensor)[0].numpy())
    return np.stack(out)


def test_database_and_queries_with_text_and_modifiers(world):
    folder, model, proxy = world
    common = ["encode", "--model", str(folder / "rmac.pt"), str(folder / "images.jsonl"), "--proxy",
              str(folder / "proxy.h5"), "--split", "test", "--device", "cpu"]
    run(*common, "-o", str(folder / "db.h5"))
    ids, emb = read(folder / "db.h5")
    assert ids == ["im2", "im3", "im4", "im5"]
    phi = direct(folder, model, ids)
    np.testing.assert_allclose(emb, phi, atol=1e-5)
    run(*common, "--first", "2", "--with-text", "--add", "dogs", "--subtract", "red", "-o", str(folder / "q.h5"))
    query_ids, query = read(folder / "q.h5")
    assert query_ids == ["im2", "im3"]
    vocab = proxy.vocab
    with torch.no_grad():
        theta = model.encode_texts(torch.from_numpy(proxy.tfidf[[2, 3]].toarray())).numpy()
        word = model.encode_texts(torch.eye(len(vocab))[[vocab.index("dog"), vocab.index("red")]]).numpy()
    expected = phi[:2] + theta + word[0] - word[1]
    np.testing.assert_allclose(query, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-5)

    out = run("match", str(folder / "q.h5"), str(folder / "db.h5"), "--top-k", "3", "--sims", str(folder / "s.h5"))
    rankings = [json.loads(line) for line in out.splitlines()]
    for row, ranking in enumerate(rankings):
        assert ranking["direction"] == "i2i" and ranking["query"] not in ranking["ids"]
        scores = {i: float(query[row] @ emb[k]) for k, i in enumerate(ids) if i != ranking["query"]}
        assert ranking["ids"] == sorted(scores, key=lambda i: -scores[i])
    scored = json.loads(run("score", "semantic", str(folder / "s.h5"), "--proxy", str(folder / "proxy.h5"),
                            "--R", "1,2"))
    assert scored["n_queries"] == 2


def test_an_interrupted_plain_run_of_queries_with_text_continues_with_resume(world, tmp_path, capsys, monkeypatch):
    """The images' phi is what is committed as it comes (R-MAC over images is the long part); the text is added
    when the run ends, so a resumed run writes the queries an uninterrupted one writes."""
    folder, _, _ = world
    args = ["encode", "--model", str(folder / "rmac.pt"), str(folder / "images.jsonl"), "--proxy",
            str(folder / "proxy.h5"), "--split", "test", "--with-text", "--add", "dogs", "--device", "cpu",
            "--batch-size", "1"]
    run(*args, "-o", str(tmp_path / "whole.h5"))
    out = tmp_path / "q.h5"
    err = interrupted_then_resumed(monkeypatch, capsys, encode_step, "image_batches", 2, *args, "-o", out)
    assert f"encode: resuming {out}: 2 of 4 images kept from an interrupted run\n" in err
    (ids, emb), (whole_ids, whole) = read(out), read(tmp_path / "whole.h5")
    assert ids == whole_ids == ["im2", "im3", "im4", "im5"]
    np.testing.assert_allclose(emb, whole, rtol=1e-6, atol=1e-7)


def test_unknown_modifier_word_is_one_line_naming_it(world, capsys):
    folder, _, proxy = world
    err = fails(capsys, "encode", "--model", str(folder / "rmac.pt"), str(folder / "images.jsonl"), "--add",
                "zebra", "-o", str(folder / "bad.h5"))
    assert "'zebra'" in err and len(err.strip().splitlines()) == 1 and not (folder / "bad.h5").exists()


def test_explain_writes_a_picture_per_pair(world):
    folder, _, _ = world
    run("encode", "--model", str(folder / "rmac.pt"), str(folder / "images.jsonl"), "--proxy",
        str(folder / "proxy.h5"), "--split", "test", "-o", str(folder / "all.h5"))
    run("match", str(folder / "all.h5"), str(folder / "all.h5"), "--top-k", "2", "-o", str(folder / "r.jsonl"))
    run("explain", str(folder / "r.jsonl"), "--model", str(folder / "rmac.pt"), "--images",
        str(folder / "images.jsonl"), "--queries", "2", "--top", "2", "-o", str(folder / "fig3"))
    pictures = sorted(p.name for p in (folder / "fig3").iterdir())
    assert len(pictures) == 4 and pictures[0].startswith("im2__")
    assert Image.open(folder / "fig3" / pictures[0]).size == (32 + 8 + 32, 27)


def test_a_hugging_face_dataset_is_encoded_as_its_images_are(world, tmp_path):
    """`encode DATASET` (its images as embedded bytes, ids from its id column) gives the embeddings of
    `encode images.jsonl` of the same images and ids."""
    import datasets

    folder, _, _ = world
    features = datasets.Features({"image": datasets.Image(), "image_id": datasets.Value("string"),
                                  "caption": datasets.Value("string")})
    rows = {"image": [{"bytes": (folder / f"{i}.png").read_bytes(), "path": None} for i in range(len(CAPTIONS))],
            "image_id": [f"im{i}" for i in range(len(CAPTIONS))], "caption": CAPTIONS}
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(tmp_path / "world.parquet"))
    for source, out in ((folder / "images.jsonl", "files.h5"), (tmp_path / "world.parquet", "dataset.h5")):
        run("encode", "--model", str(folder / "rmac.pt"), str(source), "--device", "cpu", "-o", str(tmp_path / out))
    files, dataset = read(tmp_path / "files.h5"), read(tmp_path / "dataset.h5")
    assert dataset[0] == files[0] == [f"im{i}" for i in range(len(CAPTIONS))]
    np.testing.assert_array_equal(dataset[1], files[1])
