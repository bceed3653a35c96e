"""`vltools tfidf-proxy` and `vltools mine-triplets` on small files: the proxy schema, the triplets, bad input."""

from __future__ import annotations

import json

import h5py
import numpy as np
from click.testing import CliRunner
from matching_helpers import fails

from vltools.cli import cli
from vltools.io.proxy import read_proxy, read_proxy_file

WORDS = ["dog", "cat", "tree", "car", "beach", "horse", "cake", "snow"]


def write_captions(path, n=30):
    rng = np.random.default_rng(0)
    with open(path, "w") as stream:
        for i in range(n):
            split = "train" if i < 20 else "val"
            for _ in range(3):
                words = " ".join(rng.choice(WORDS, 3))
                stream.write(json.dumps({"image_id": f"im{i}", "caption": f"a {words}", "split": split}) + "\n")


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["--quiet", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_proxy_file_and_triplets(tmp_path):
    captions = tmp_path / "caps.jsonl"
    write_captions(captions)
    run("tfidf-proxy", str(captions), "--k", "4", "-o", str(tmp_path / "proxy.h5"))
    proxy = read_proxy_file(tmp_path / "proxy.h5")
    assert proxy.ids == [f"im{i}" for i in range(30)] and proxy.neighbors.shape == (30, 4)
    assert set(proxy.splits[:20]) == {"train"} and proxy.vocab == sorted(proxy.vocab)
    assert read_proxy(tmp_path / "proxy.h5").tfidf.n_rows == 30          # what `score semantic` reads
    for row, neighbours in enumerate(proxy.neighbors):                     # neighbours stay in the split
        assert all(proxy.splits[n] == proxy.splits[row] for n in neighbours)
    with h5py.File(tmp_path / "proxy.h5") as handle:
        assert handle.attrs["format"] == "vltools.proxy"
    out = run("mine-triplets", str(tmp_path / "proxy.h5"), "--queries", "3", "--relevant", "2", "--pool", "10",
              "--per-pair", "2")
    triplets = [json.loads(line) for line in out.splitlines()]
    assert triplets and all(t["query"] != t["negative"] for t in triplets)
    assert all(int(t[k][2:]) < 20 for t in triplets for k in ("query", "positive", "negative"))


def test_captions_of_images_absent_from_the_images_file(tmp_path, capsys):
    captions = tmp_path / "caps.jsonl"
    write_captions(captions)
    images = tmp_path / "images.jsonl"
    images.write_text("".join(json.dumps({"image_id": f"im{i}", "path": f"{i}.png", "split": "train"}) + "\n"
                              for i in range(5)))
    err = fails(capsys, "tfidf-proxy", str(captions), "--images", str(images), "-o", str(tmp_path / "p.h5"))
    assert "absent from" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.h5").exists()


def test_empty_training_split(tmp_path, capsys):
    captions = tmp_path / "caps.jsonl"
    captions.write_text(json.dumps({"image_id": "a", "caption": "a dog", "split": "val"}) + "\n")
    err = fails(capsys, "tfidf-proxy", str(captions), "-o", str(tmp_path / "p.h5"))
    assert "training split" in err and not (tmp_path / "p.h5").exists()


def test_embeddings_of_other_images(tmp_path, capsys):
    from vltools.io.embeddings import write_embeddings

    captions = tmp_path / "caps.jsonl"
    write_captions(captions)
    run("tfidf-proxy", str(captions), "--k", "4", "-o", str(tmp_path / "proxy.h5"))
    write_embeddings(tmp_path / "emb.h5", ["x1", "x2"], [np.eye(2, dtype=np.float32)], {"side": "images"})
    err = fails(capsys, "mine-triplets", str(tmp_path / "proxy.h5"), "--embeddings", str(tmp_path / "emb.h5"),
                "-o", str(tmp_path / "t.jsonl"))
    assert "have no embedding" in err and not (tmp_path / "t.jsonl").exists()


def test_the_proxy_scored_as_a_model_is_the_text_oracle(tmp_path):
    captions = tmp_path / "caps.jsonl"
    write_captions(captions)
    run("tfidf-proxy", str(captions), "--k", "4", "-o", str(tmp_path / "proxy.h5"))
    result = json.loads(run("score", "semantic", str(tmp_path / "proxy.h5"), "--proxy", str(tmp_path / "proxy.h5"),
                            "--split", "val", "--queries", "4", "--R", "1,2,5"))
    assert result["n_queries"] == 4 and result["ndcg_auc"] == 100.0


def test_k_beyond_the_largest_split_keeps_what_can_be_found(tmp_path, caplog):
    """--k 1000000000 once tried to allocate hundreds of GiB; k is now at most the largest split's size - 1."""
    captions = tmp_path / "caps.jsonl"
    write_captions(captions)                       # 20 train and 10 val images
    run("tfidf-proxy", str(captions), "--k", "1000000000", "-o", str(tmp_path / "proxy.h5"))
    proxy = read_proxy_file(tmp_path / "proxy.h5")
    assert proxy.neighbors.shape == (30, 19)
    assert (proxy.neighbors[:20] >= 0).all() and (proxy.neighbors[20:, 9:] == -1).all()
    with h5py.File(tmp_path / "proxy.h5") as handle:
        assert int(handle.attrs["k"]) == 19
