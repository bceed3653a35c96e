"""`vltools tfidf-proxy` and `vltools mine-triplets` on small files: the proxy schema, the triplets, bad input."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
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


def test_an_image_s_words_count_once_unless_occurrences_are_asked_for(tmp_path):
    captions = tmp_path / "caps.jsonl"
    lines = [("p", "a dog and a dog", "train"), ("q", "a cat", "train"), ("r", "a dog and a cat", "train"),
             ("s", "dog dog cat", "val"), ("t", "dog cat", "val")]
    captions.write_text("".join(json.dumps({"image_id": i, "caption": c, "split": split}) + "\n"
                                for i, c, split in lines))
    attrs, rows = {}, {}
    for words in (None, "distinct", "occurrences"):
        out = tmp_path / f"{words}.h5"
        run("tfidf-proxy", str(captions), "--k", "1", *(["--words", words] if words else []), "-o", str(out))
        with h5py.File(out) as handle:
            attrs[words] = handle.attrs["words"]
        rows[words] = read_proxy_file(out).tfidf.toarray()
    assert attrs == {None: "distinct", "distinct": "distinct", "occurrences": "occurrences"}
    np.testing.assert_array_equal(rows[None], rows["distinct"])
    # s says "dog" twice: as a set it is t; counted, dog weighs twice as much as cat (both of idf ln(3 / 2))
    np.testing.assert_allclose(rows["distinct"][3], rows["distinct"][4])
    vocab = read_proxy_file(tmp_path / "occurrences.h5").vocab
    dog, cat = rows["occurrences"][3, vocab.index("dog")], rows["occurrences"][3, vocab.index("cat")]
    assert dog == pytest.approx(2 * cat)
    # objects count every object of a synset (the paper's histogram) unless told otherwise
    run("tfidf-proxy", str(captions), "--method", "objects", "--k", "1", "-o", str(tmp_path / "objects.h5"))
    with h5py.File(tmp_path / "objects.h5") as handle:
        assert handle.attrs["words"] == "occurrences"


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


def test_a_split_whose_every_image_is_relevant_to_every_other_gives_no_triplet_and_is_refused(tmp_path, capsys):
    """Each of the 3 validation images has the 2 others as neighbours: no irrelevant image, 0 triplets, exit 0."""
    captions = tmp_path / "caps.jsonl"
    write_captions(captions, n=23)
    run("tfidf-proxy", str(captions), "--k", "2", "-o", str(tmp_path / "proxy.h5"))
    err = fails(capsys, "mine-triplets", str(tmp_path / "proxy.h5"), "--split", "val", "-o", str(tmp_path / "t.jsonl"))
    assert err.splitlines() == [
        f"vltools: error: {tmp_path / 'proxy.h5'}: no triplet in split 'val': every pooled image is relevant to its "
        "query (3 images); give a larger --pool or split, or rebuild the proxy with fewer neighbours"]
    assert not (tmp_path / "t.jsonl").exists()


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


def write_user_study(tmp_path):
    """Captions where q and a share their words and b shares none, and a triplet whose annotators all chose a."""
    captions = tmp_path / "caps.jsonl"
    write_captions(captions)
    with open(captions, "a") as stream:
        for image, caption in (("q", "a dog and a cat"), ("a", "a cat near a dog"), ("b", "a car in the snow")):
            stream.write(json.dumps({"image_id": image, "caption": caption, "split": "val"}) + "\n")
    triplets = tmp_path / "study.jsonl"
    triplets.write_text(json.dumps({"query": "q", "a": "a", "b": "b", "o1": 4, "o2": 0, "o3": 1}) + "\n"
                        + json.dumps({"query": "q", "a": "b", "b": "a", "o1": 0, "o2": 3, "o3": 0}) + "\n")
    return captions, triplets


AGREEMENT = 100 * (4 / 5 + 3 / 3) / 2     # q closer to a in both triplets: w o_i / (o1 + o2), w = (o1 + o2) / total
FV_SMALL = ("--method", "word2vec-fv", "--dim", "8", "--components", "2", "--min-count", "1", "--epochs", "20")


def test_word2vec_fisher_proxy_end_to_end(tmp_path):
    captions, triplets = write_user_study(tmp_path)
    images = tmp_path / "images.jsonl"
    listed = [(i, "val") for i in ("q", "a", "b", "none")] + [(f"im{i}", "train" if i < 20 else "val")
                                                             for i in range(30)]
    images.write_text("".join(json.dumps({"image_id": i, "path": f"{i}.png", "split": split}) + "\n"
                              for i, split in listed))
    run("tfidf-proxy", str(captions), "--images", str(images), *FV_SMALL, "--k", "4", "-o", str(tmp_path / "fv.h5"))
    proxy = read_proxy_file(tmp_path / "fv.h5")
    assert proxy.ids[:4] == ["q", "a", "b", "none"] and proxy.tfidf.shape == (34, 2 * 2 * 8)
    assert proxy.vocab[:2] == ["mu:0:0", "mu:0:1"] and proxy.vocab[-1] == "sigma:1:7" and (proxy.idf == 1).all()
    norms = np.sqrt(np.asarray(proxy.tfidf.multiply(proxy.tfidf).sum(axis=1)).ravel())
    np.testing.assert_allclose(np.delete(norms, 3), 1, rtol=1e-5)
    assert norms[3] == 0                                                   # "none" has no caption: zero vector
    np.testing.assert_allclose((proxy.tfidf[0] @ proxy.tfidf[1].T).toarray(), 1, rtol=1e-5)  # same words
    with h5py.File(tmp_path / "fv.h5") as handle:
        attrs = dict(handle.attrs)
    assert attrs["method"] == "word2vec-fv" and attrs["components"] == 2 and attrs["word_dim"] == 8
    assert attrs["min_count"] == 1 and attrs["images_without_words"] == 1 and attrs["words"] == "distinct"
    assert attrs["gmm_starts"] == 5 and np.isfinite(attrs["gmm_log_likelihood"])
    # vectors are trained on the training split only: "a" and the 8 WORDS; "and", "near", "in", "the" get none
    assert attrs["words_with_vectors"] == 9 and attrs["words_without_vectors"] == 4
    result = json.loads(run("score", "semantic", str(tmp_path / "fv.h5"), "--split", "val", "--triplets",
                            str(triplets)))
    assert result["n_triplets"] == 2 and result["user_agreement"] == AGREEMENT
    out = run("mine-triplets", str(tmp_path / "fv.h5"), "--queries", "3", "--relevant", "2", "--pool", "10",
              "--per-pair", "2")
    assert out.strip()


def write_vectors(path, words: dict[str, tuple[float, ...]]) -> None:
    """A word2vec binary file: "N D", then word, space, D little-endian float32, newline."""
    dim = len(next(iter(words.values())))
    path.write_bytes(f"{len(words)} {dim}\n".encode() + b"".join(
        w.encode() + b" " + np.array(v, dtype="<f4").tobytes() + b"\n" for w, v in words.items()))


def test_word2vec_fisher_proxy_with_published_vectors(tmp_path):
    captions, triplets = write_user_study(tmp_path)
    rng = np.random.default_rng(0)
    known = {w: tuple(rng.normal(size=3)) for w in ["zebra", *WORDS]}           # no vector for "a", "and", ...
    write_vectors(tmp_path / "vectors.bin", known)
    run("tfidf-proxy", str(captions), "--method", "word2vec-fv", "--word-vectors", str(tmp_path / "vectors.bin"),
        "--components", "3", "-o", str(tmp_path / "fv.h5"))
    proxy = read_proxy_file(tmp_path / "fv.h5")
    assert proxy.tfidf.shape == (33, 2 * 3 * 3)
    with h5py.File(tmp_path / "fv.h5") as handle:
        assert handle.attrs["word_vectors"] == str(tmp_path / "vectors.bin") and "window" not in handle.attrs
        assert handle.attrs["words_with_vectors"] == len(WORDS)
    result = json.loads(run("score", "semantic", str(tmp_path / "fv.h5"), "--split", "val", "--triplets",
                            str(triplets)))
    assert result["user_agreement"] == AGREEMENT


def test_word2vec_fisher_options_and_bad_vector_files(tmp_path, capsys):
    captions = tmp_path / "caps.jsonl"
    write_captions(captions)
    write_vectors(tmp_path / "vectors.bin", {w: (1.0, float(i)) for i, w in enumerate(WORDS)})
    for args, said in ((["--word-vectors", str(tmp_path / "vectors.bin")], "--word-vectors is an option of --method "
                        "word2vec-fv, not captions"),
                       (["--method", "objects", "--components", "4"], "--components is an option of --method "
                        "word2vec-fv, not objects"),
                       (["--starts", "2"], "--starts is an option of --method word2vec-fv, not captions"),
                       (["--method", "word2vec-fv", "--word-vectors", str(tmp_path / "vectors.bin"), "--dim", "8"],
                        "--dim sets the training of word vectors, which --word-vectors replaces")):
        result = CliRunner().invoke(cli, ["tfidf-proxy", str(captions), *args, "-o", str(tmp_path / "p.h5")])
        assert result.exit_code == 2 and said in result.output, result.output
    data = (tmp_path / "vectors.bin").read_bytes()
    (tmp_path / "vectors.bin").write_bytes(data[:-6])
    err = fails(capsys, "tfidf-proxy", str(captions), "--method", "word2vec-fv", "--word-vectors",
                str(tmp_path / "vectors.bin"), "-o", str(tmp_path / "p.h5"))
    assert f"{tmp_path / 'vectors.bin'}: record 8 of 8" in err and "'snow'" in err and "truncated" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "p.h5").exists()
    err = fails(capsys, "tfidf-proxy", str(captions), "--method", "word2vec-fv", "--min-count", "1000",
                "-o", str(tmp_path / "p.h5"))
    assert "no word occurs 1000 times" in err and "--min-count" in err and not (tmp_path / "p.h5").exists()
    err = fails(capsys, "tfidf-proxy", str(captions), *FV_SMALL[:4], "--components", "50", "--min-count", "1",
                "-o", str(tmp_path / "p.h5"))
    assert "cannot fit 50 mixture components" in err and "--components" in err


def test_word_vectors_of_none_of_the_words(tmp_path, capsys):
    captions = tmp_path / "caps.jsonl"
    write_captions(captions)
    write_vectors(tmp_path / "vectors.bin", {"zebra": (1.0, 2.0), "giraffe": (0.5, 0.5)})
    err = fails(capsys, "tfidf-proxy", str(captions), "--method", "word2vec-fv", "--word-vectors",
                str(tmp_path / "vectors.bin"), "-o", str(tmp_path / "p.h5"))
    assert f"{tmp_path / 'vectors.bin'}: none of the 9 words" in err and "training split" in err
    assert not (tmp_path / "p.h5").exists()
