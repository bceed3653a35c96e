"""`vltools index` and `match --index-file`: a saved index built once from embeddings files, read back with its
provenance, searched exactly (Flat: the brute-force order) or approximately (IVF-PQ: recall against exact well above
chance), and every mismatch or damaged file refused on one line."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner
from index_helpers import clustered, save, unit
from matching_helpers import fails

from vltools.cli import cli
from vltools.io.index import read_index
from vltools.io.provenance import command_line

pytest.importorskip("faiss")


def run(*args: object) -> list[dict]:
    result = CliRunner().invoke(cli, ["--quiet", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    """200 image and 30 caption embeddings (16-d, one model), and a Flat index of the images."""
    folder = tmp_path_factory.mktemp("index")
    rng = np.random.default_rng(0)
    images, captions = unit(rng.normal(size=(200, 16))), unit(rng.normal(size=(30, 16)))
    save(folder / "imgs.h5", "i", images, "images")
    save(folder / "caps.h5", "c", captions, "captions")
    run("index", folder / "imgs.h5", "-o", folder / "flat.h5")
    return folder, images, captions


def test_the_index_records_its_rows_and_provenance(gallery):
    folder, images, _ = gallery
    saved = read_index(folder / "flat.h5")
    assert saved.ids == [f"i{k}" for k in range(200)]
    assert (saved.metric, saved.factory, saved.dims, saved.side, saved.checkpoint_digest) == \
        ("ip", "Flat", 16, "images", "d1")
    assert {k: saved.attrs[k] for k in ("count", "model", "checkpoint", "embeddings", "train_size")} == \
        {"count": 200, "model": "vse", "checkpoint": "vse.pt", "embeddings": str(folder / "imgs.h5"), "train_size": 0}
    assert saved.attrs["command"] == command_line()   # this process's command line, whatever runs the test


def test_flat_search_is_the_brute_force_order(gallery):
    folder, images, captions = gallery
    records = run("match", folder / "caps.h5", "--index-file", folder / "flat.h5", "-k", "5")
    sims = captions.astype(np.float64) @ images.T.astype(np.float64)
    assert [r["query"] for r in records] == [f"c{k}" for k in range(30)]
    for row, record in enumerate(records):
        best = np.argsort(-sims[row])[:5]
        assert record["direction"] == "t2i"
        assert record["ids"] == [f"i{k}" for k in best]
        np.testing.assert_allclose(record["scores"], sims[row, best], rtol=1e-5)


def test_images_query_images_leaving_themselves_out(gallery):
    folder, images, _ = gallery
    records = run("match", folder / "imgs.h5", "--index-file", folder / "flat.h5", "--top-k", "3")
    sims = images @ images.T
    np.fill_diagonal(sims, -np.inf)
    assert records[7]["query"] == "i7" and records[7]["direction"] == "i2i"
    assert records[7]["ids"] == [f"i{k}" for k in np.argsort(-sims[7])[:3]]


def test_an_l2_index_ranks_nearest_first_with_negated_squared_distances(gallery, tmp_path):
    folder, images, captions = gallery
    run("index", folder / "imgs.h5", "--metric", "l2", "-o", tmp_path / "l2.h5")
    record = run("match", folder / "caps.h5", "--index-file", tmp_path / "l2.h5", "-k", "4")[2]
    distances = ((images - captions[2]) ** 2).sum(axis=1)
    nearest = np.argsort(distances)[:4]
    assert record["ids"] == [f"i{k}" for k in nearest]
    np.testing.assert_allclose(record["scores"], -distances[nearest], rtol=1e-4)


def test_ivf_pq_recall_against_exact_is_well_above_chance(tmp_path):
    rng = np.random.default_rng(1)
    rows = clustered(rng, 4000, 32, 40)
    queries = clustered(np.random.default_rng(2), 100, 32, 40)
    save(tmp_path / "imgs.h5", "i", rows, "images")
    save(tmp_path / "caps.h5", "c", queries, "captions")
    run("index", tmp_path / "imgs.h5", "--factory", "IVF16,PQ16np", "--train-size", "3000", "--seed", "3",
        "-o", tmp_path / "pq.h5")
    saved = read_index(tmp_path / "pq.h5")
    assert (saved.factory, saved.attrs["train_size"], saved.attrs["seed"]) == ("IVF16,PQ16np", 3000, 3)
    assert len(saved.data) < rows.nbytes / 2        # compressed: 16 bytes a row against 128
    found = run("match", tmp_path / "caps.h5", "--index-file", tmp_path / "pq.h5", "-k", "10", "--nprobe", "4")
    exact = np.argsort(-(queries @ rows.T), axis=1)[:, :10]
    recall = np.mean([len({f"i{k}" for k in exact[q]} & set(found[q]["ids"])) / 10 for q in range(100)])
    assert recall > 0.5        # chance: 10 / 4000


@pytest.mark.parametrize(("queries", "extra", "message"), [
    ("short", [], "flat.h5: indexes 16-d embeddings, the queries are 8-d; encode them with the model"),
    ("other", [], "other.h5: encoded by another checkpoint (d2) than the embeddings indexed in "),
    ("caps", ["--index", "Flat"], "--index Flat builds an index in memory and --index-file "),
    ("caps", ["--sims", "s.h5"], "--sims needs every pair scored, which searching a saved index avoids"),
    ("flatcaps", [], "caps.h5: captions embeddings cannot query the captions embeddings indexed in "),
], ids=["dimension", "model", "index-and-index-file", "sims", "captions-for-captions"])
def test_mismatches_are_refused_in_one_line(gallery, tmp_path, capsys, queries, extra, message):
    folder, _, captions = gallery
    save(tmp_path / "short.h5", "c", captions[:, :8], "captions")
    save(tmp_path / "other.h5", "c", captions, "captions", digest="d2")
    index = folder / "flat.h5"
    if queries == "flatcaps":
        run("index", folder / "caps.h5", "-o", tmp_path / "capsindex.h5")
        index, queries = tmp_path / "capsindex.h5", "caps"
    source = folder / "caps.h5" if queries == "caps" else tmp_path / f"{queries}.h5"
    extra = [str(tmp_path / e) if e.endswith(".h5") else e for e in extra]
    err = fails(capsys, "match", str(source), "--index-file", str(index), "-o", str(tmp_path / "out.jsonl"), *extra)
    assert len(err.strip().splitlines()) == 1 and message in err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_second_input_with_an_index_file_is_refused(gallery, capsys):
    folder, _, _ = gallery
    err = fails(capsys, "match", str(folder / "caps.h5"), str(folder / "imgs.h5"), "--index-file",
                str(folder / "flat.h5"))
    assert err.strip() == (f"vltools: error: --index-file {folder / 'flat.h5'} is searched by the queries alone; drop "
                           f"{folder / 'imgs.h5'}, or match the two embeddings files without --index-file")


def test_a_truncated_index_file_is_one_line(gallery, tmp_path, capsys):
    folder, _, _ = gallery
    truncated = tmp_path / "cut.h5"
    truncated.write_bytes((folder / "flat.h5").read_bytes()[:3000])
    err = fails(capsys, "match", str(folder / "caps.h5"), "--index-file", str(truncated))
    assert err.strip().splitlines() == [f"vltools: error: {truncated}: not a readable HDF5 file (OSError); it may be "
                                        "truncated, rerun the stage that wrote it"]


def test_a_failed_build_writes_nothing_and_keeps_the_previous_index(gallery, tmp_path, capsys):
    folder, _, _ = gallery
    out = tmp_path / "g.h5"
    err = fails(capsys, "index", str(folder / "imgs.h5"), "--factory", "IVF512,Flat", "-o", str(out))
    assert "cannot train the index: " in err and "Number of training points (200)" in err
    assert os.listdir(tmp_path) == []
    out.write_bytes(b"previous")
    err = fails(capsys, "index", str(folder / "imgs.h5"), "--factory", "bogus", "-o", str(out))
    assert "--factory 'bogus' is not a FAISS index factory string (could not parse index string bogus)" in err
    assert out.read_bytes() == b"previous" and os.listdir(tmp_path) == ["g.h5"]


@pytest.mark.parametrize("factory", ["IDMap,Flat", "IDMap2,Flat"])
def test_an_index_faiss_cannot_add_rows_to_is_one_line_and_writes_nothing(gallery, tmp_path, capsys, factory):
    folder, _, _ = gallery
    err = fails(capsys, "index", str(folder / "imgs.h5"), "--factory", factory, "-o", str(tmp_path / "g.h5"))
    assert err.strip().splitlines() == [f"vltools: error: --factory {factory!r}: cannot add the embeddings to the "
                                        "index (add does not make sense with IndexIDMap, use add_with_ids); choose "
                                        "another factory string, e.g. Flat, IVF1024,Flat or IVF4096,PQ64"]
    assert os.listdir(tmp_path) == []


def test_match_without_a_second_input_or_an_index_file_is_a_usage_error(gallery, capsys):
    folder, _, _ = gallery
    result = CliRunner().invoke(cli, ["match", str(folder / "caps.h5")])
    assert result.exit_code == 2 and "only --index-file searches one input" in result.output
