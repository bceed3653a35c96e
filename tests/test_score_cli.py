"""`vltools score ...` end to end: the published COCO caption demo numbers, JSON layouts, exit statuses."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from pipeline_fixtures import run_process

from vltools.eval.retrieval import retrieval_metrics
from vltools.io.hdf5 import write_arrays
from vltools.io.logp import write_logp
from vltools.io.sims import write_sims

COCO = Path(__file__).parent / "data" / "coco_caption"
PUBLISHED = {"Bleu_1": 0.579, "Bleu_2": 0.404, "Bleu_3": 0.279, "Bleu_4": 0.191, "METEOR": 0.195,
             "ROUGE_L": 0.396, "CIDEr": 0.600}


def stdout_json(result) -> dict:
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def one_line_error(result, *needles: str) -> str:
    assert result.returncode == 1, (result.returncode, result.stderr.decode())
    message = result.stderr.decode().strip()
    assert result.stdout == b"" and "Traceback" not in message
    last = message.splitlines()[-1]
    for needle in needles:
        assert needle in last, last
    return last


def jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_coco_caption_demo_numbers(tmp_path, vltools_cmd):
    # the coco-caption demo: 1000 fake captions (raw, PTB-tokenised here) against references already tokenised
    per_image = tmp_path / "per_image.jsonl"
    result = vltools_cmd("score", "caption", COCO / "captions_val2014_fakecap_results.json",
                         "--refs", COCO / "fakecap_1000_tokenized_refs_and_tests.spice_input.json", "--tokenized",
                         "--per-image", per_image)
    metrics = stdout_json(result)
    # SPICE runs where its CoreNLP models are installed; else it is null with the reason
    assert set(metrics) - {"SPICE", "skipped"} == set(PUBLISHED)
    assert metrics["SPICE"] is not None or "not installed" in metrics["skipped"]["SPICE"]
    assert {name: round(value, 3) for name, value in metrics.items() if name in PUBLISHED} == PUBLISHED
    table = result.stderr.decode()
    assert "test 9893 ref 9855" in table and "5732 2510 1043 423" in table
    rows = [json.loads(line) for line in per_image.read_text().splitlines()]
    assert len(rows) == 1000 and rows[0]["image_id"] == "404464"
    for name in ("ROUGE_L", "CIDEr"):  # both are plain means of the per-image scores
        assert np.mean([row[name] for row in rows]) == pytest.approx(metrics[name])


def test_no_meteor_leaves_the_other_scores_unchanged(tmp_path, vltools_cmd):
    results = COCO / "captions_val2014_fakecap_results.json"
    refs = COCO / "fakecap_1000_tokenized_refs_and_tests.spice_input.json"
    result = vltools_cmd("score", "caption", results, "--refs", refs, "--tokenized", "--no-meteor", "--no-spice")
    metrics = stdout_json(result)
    assert set(metrics) == set(PUBLISHED) - {"METEOR"}
    assert {name: round(value, 3) for name, value in metrics.items()} == \
        {name: value for name, value in PUBLISHED.items() if name != "METEOR"}


def test_quiet_silences_the_java_tokenizer_too(tmp_path, vltools_cmd):
    """pycocoevalcap's PTBTokenizer (a Java process) prints "PTBTokenizer tokenized N tokens ..." on standard
    error; --quiet means nothing there."""
    refs = jsonl(tmp_path / "refs.jsonl", [{"image_id": "1", "caption": "A dog runs."}])
    predictions = jsonl(tmp_path / "predictions.jsonl", [{"image_id": "1", "caption": "A dog, running."}])
    quiet = vltools_cmd("--quiet", "score", "caption", predictions, "--refs", refs, "--no-meteor", "--no-spice")
    assert quiet.returncode == 0 and quiet.stderr == b"" and stdout_json(quiet)["Bleu_1"] > 0


def test_caption_input_errors(tmp_path, vltools_cmd):
    refs = jsonl(tmp_path / "refs.jsonl", [{"image_id": i, "caption": "a dog"} for i in ("1", "2")])
    unknown = jsonl(tmp_path / "unknown.jsonl", [{"image_id": "1", "caption": "a dog"},
                                                 {"image_id": "77", "caption": "a cat"}])
    one_line_error(vltools_cmd("score", "caption", unknown, "--refs", refs), "unknown.jsonl", "'77'")
    twice = jsonl(tmp_path / "twice.jsonl", [{"image_id": "1", "caption": "a dog"},
                                             {"image_id": "1", "caption": "a cat"}])
    one_line_error(vltools_cmd("score", "caption", twice, "--refs", refs), "twice.jsonl", "'1'", "several")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    one_line_error(vltools_cmd("score", "caption", empty, "--refs", refs), "empty.jsonl", "empty")
    predictions = jsonl(tmp_path / "pred.jsonl", [{"image_id": "1", "caption": "a dog"}])
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + "/nonexistent"}
    no_java = run_process([sys.executable, "-m", "vltools", "score", "caption", str(predictions), "--refs",
                           str(refs)], capture_output=True, env=env)
    one_line_error(no_java, "java", "apt-get install default-jre-headless")


def test_empty_reference_warned_by_default_refused_with_strict(tmp_path, vltools_cmd):
    refs = jsonl(tmp_path / "refs.jsonl", [{"image_id": "1", "caption": "a dog runs"},
                                           {"image_id": "1", "caption": ""}])
    predictions = jsonl(tmp_path / "pred.jsonl", [{"image_id": "1", "caption": "a dog runs"}])
    scored = vltools_cmd("score", "caption", predictions, "--refs", refs, "--no-meteor", "--no-spice")
    assert stdout_json(scored)["Bleu_1"] == pytest.approx(1.0)
    warnings = [line for line in scored.stderr.decode().splitlines() if "empty or blank references" in line]
    assert len(warnings) == 1 and "1 empty or blank references of predicted image_ids ('1')" in warnings[0]
    strict = vltools_cmd("score", "caption", predictions, "--refs", refs, "--no-meteor", "--no-spice", "--strict")
    one_line_error(strict, "refs.jsonl", "line 2", "empty reference for image_id '1'")


def sims_world(tmp_path, n_images=20, per_image=3, seed=0):
    rng = np.random.default_rng(seed)
    index = np.repeat(np.arange(n_images), per_image)
    sims = rng.normal(size=(n_images, len(index))) + 1.5 * (np.arange(n_images)[:, None] == index)
    images = [f"im{i}" for i in range(n_images)]
    captions = [f"im{i}#{k}" for i in range(n_images) for k in range(per_image)]
    path = tmp_path / "sims.h5"
    write_sims(path, sims, images, captions, [images[i] for i in index])
    return path, sims, index, images, captions


def test_retrieval_from_sims_and_rankings(tmp_path, vltools_cmd):
    path, sims, index, images, captions = sims_world(tmp_path)
    result = stdout_json(vltools_cmd("score", "retrieval", path))
    assert list(result) == ["i2t", "t2i", "rsum", "mR", "n_images", "n_captions", "protocol"]
    assert list(result["i2t"]) == ["R@1", "R@5", "R@10", "medr", "meanr"]
    expected = retrieval_metrics(sims, index)
    for key in ("i2t", "t2i", "rsum"):
        assert result[key] == pytest.approx(expected[key])
    assert result["protocol"] == "full"
    assert result["mR"] == pytest.approx(sum(result[d][f"R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10)) / 6)
    assert (result["n_images"], result["n_captions"]) == (20, 60)
    folds = stdout_json(vltools_cmd("score", "retrieval", path, "--protocol", "coco1k", "--fold-size", "10"))
    assert (folds["protocol"], folds["fold_size"]) == ("coco1k", 10)
    assert folds["rsum"] == pytest.approx(sum(folds[d][f"R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10)))
    rankings = []
    for i, image in enumerate(images):
        order = np.argsort(-sims[i])
        rankings.append({"query": image, "direction": "i2t", "ids": [captions[j] for j in order],
                         "scores": sims[i, order].tolist()})
    for j, caption in enumerate(captions):
        order = np.argsort(-sims[:, j])
        rankings.append({"query": caption, "direction": "t2i", "ids": [images[i] for i in order],
                         "scores": sims[order, j].tolist()})
    ranks_path = jsonl(tmp_path / "ranks.jsonl", rankings)
    caps = jsonl(tmp_path / "caps.jsonl", [{"image_id": images[i], "caption": "x"} for i in index])
    from_rankings = stdout_json(vltools_cmd("score", "retrieval", ranks_path, "--captions", caps))
    for key in ("i2t", "t2i", "rsum"):
        assert from_rankings[key] == pytest.approx(result[key])
    mixed = jsonl(tmp_path / "mixed.jsonl", [{"image_id": images[i], "caption": "x", "split": "test"} for i in index]
                  + [{"image_id": "train_only", "caption": "y", "split": "train"}])
    test_split = stdout_json(vltools_cmd("score", "retrieval", ranks_path, "--captions", mixed, "--split", "test"))
    assert test_split["rsum"] == pytest.approx(result["rsum"])
    # without --split: the split whose captions were ranked (the README's literal line on match's output)
    assert stdout_json(vltools_cmd("score", "retrieval", ranks_path, "--captions", mixed)) == test_split
    one_line_error(vltools_cmd("score", "retrieval", ranks_path, "--captions", mixed, "--split", "val"), "'val'")
    assert vltools_cmd("score", "retrieval", ranks_path).returncode == 2
    one_line_error(vltools_cmd("score", "retrieval", ranks_path, "--captions", caps, "--protocol", "coco1k"),
                   "sims")


def test_retrieval_of_a_npy_matrix_equals_the_same_matrix_as_a_sims_file(tmp_path, vltools_cmd):
    # precomp layout: five captions per image in order, as the released evaluation code saves its matrices
    path, sims, index, images, captions = sims_world(tmp_path, n_images=20, per_image=5, seed=3)
    np.save(tmp_path / "sims.npy", sims.astype(np.float32))
    from_h5 = stdout_json(vltools_cmd("score", "retrieval", path))
    from_npy = stdout_json(vltools_cmd("score", "retrieval", tmp_path / "sims.npy"))
    assert from_npy == from_h5
    # ids from a captions file: rows = images in order of first mention, columns = the split's captions in order
    caps = jsonl(tmp_path / "caps.jsonl", [{"image_id": "other", "caption": "y", "split": "train"}]
                 + [{"image_id": images[i], "caption": "x", "split": "test"} for i in index])
    with_captions = stdout_json(vltools_cmd("score", "retrieval", tmp_path / "sims.npy", "--captions", caps,
                                            "--split", "test", "--protocol", "coco1k", "--fold-size", "10"))
    assert with_captions == stdout_json(vltools_cmd("score", "retrieval", path, "--protocol", "coco1k",
                                                    "--fold-size", "10"))
    np.save(tmp_path / "wide.npy", np.zeros((20, 60), dtype=np.float32))
    one_line_error(vltools_cmd("score", "retrieval", tmp_path / "wide.npy"), "wide.npy", "20 x 60", "--captions")
    one_line_error(vltools_cmd("score", "retrieval", tmp_path / "sims.npy", "--captions", caps), "sims.npy",
                   "21 images x 101 captions")
    np.save(tmp_path / "transposed.npy", sims.T.astype(np.float32))
    one_line_error(vltools_cmd("score", "retrieval", tmp_path / "transposed.npy"), "transposed")


def test_retrieval_ensemble_is_the_mean_of_the_matrices_and_needs_the_same_ids(tmp_path, vltools_cmd):
    first, sims_a, index, images, captions = sims_world(tmp_path, seed=1)
    sims_b = np.random.default_rng(2).normal(size=sims_a.shape)
    second = tmp_path / "b.h5"
    write_sims(second, sims_b, images, captions, [images[i] for i in index])
    ensemble = stdout_json(vltools_cmd("score", "retrieval", first, second))
    expected = retrieval_metrics((sims_a + sims_b) / 2, index)
    for key in ("i2t", "t2i", "rsum", "mR"):
        assert ensemble[key] == pytest.approx(expected[key])
    assert ensemble["rsum"] != pytest.approx(retrieval_metrics(sims_a, index)["rsum"])
    renamed = tmp_path / "renamed.h5"
    write_sims(renamed, sims_b, images, [f"x{c}" for c in captions], [images[i] for i in index])
    one_line_error(vltools_cmd("score", "retrieval", first, renamed), "renamed.h5", "/caption_ids", "other ids")
    shuffled = tmp_path / "shuffled.h5"
    write_sims(shuffled, sims_b[::-1], images[::-1], captions, [images[i] for i in index])
    one_line_error(vltools_cmd("score", "retrieval", first, shuffled), "shuffled.h5", "/image_ids", "another order")
    ranks = jsonl(tmp_path / "ranks.jsonl", [])
    one_line_error(vltools_cmd("score", "retrieval", first, ranks), "ranks.jsonl", "ensemble")


def test_retrieval_refuses_mismatched_ids(tmp_path, vltools_cmd):
    path = tmp_path / "ok.h5"
    write_sims(path, np.eye(2, 3), ["a", "b"], ["c0", "c1", "c2"], ["a", "b", "b"])
    caps = jsonl(tmp_path / "caps.jsonl", [{"image_id": i, "caption": "x", "caption_id": f"c{n}"}
                                           for n, i in enumerate("abb")])
    assert stdout_json(vltools_cmd("score", "retrieval", path, "--captions", caps))["n_captions"] == 3
    other = jsonl(tmp_path / "other.jsonl", [{"image_id": "a", "caption": "x", "caption_id": "c9"}])
    one_line_error(vltools_cmd("score", "retrieval", path, "--captions", other), "other.jsonl", "ok.h5")
    one_line_error(vltools_cmd("score", "retrieval", path, "--captions", tmp_path / "missing.jsonl"), "missing")
    path = tmp_path / "bad.h5"
    write_sims(path, np.zeros((2, 3)), ["a", "b"], ["c0", "c1", "c2"], ["a", "b", "ghost"])
    one_line_error(vltools_cmd("score", "retrieval", path), "bad.h5", "'ghost'")
    write_sims(path, np.zeros((2, 2)), ["a", "b"], ["c0", "c1"], ["a", "a"])
    one_line_error(vltools_cmd("score", "retrieval", path), "bad.h5", "no caption", "'b'")


def test_semantic_with_proxy_triplets_and_plot(tmp_path, vltools_cmd):
    rng = np.random.default_rng(4)
    ids = [f"im{i}" for i in range(12)]
    tfidf = rng.random((12, 9)) * (rng.random((12, 9)) < 0.5) + np.eye(12, 9) * 0.1
    tfidf /= np.linalg.norm(tfidf, axis=1, keepdims=True)
    rows, cols = np.nonzero(tfidf)
    proxy = tmp_path / "proxy.h5"
    write_arrays(proxy, "proxy", {"ids": ids, "tfidf/data": tfidf[rows, cols], "tfidf/indices": cols,
                                  "tfidf/indptr": np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=12))]),
                                  "tfidf/shape": np.array([12, 9])})
    oracle = tmp_path / "oracle.h5"
    write_sims(oracle, tfidf[:4] @ tfidf.T, ids[:4], ids)
    triplets = [{"query": "im0", "a": "im1", "b": "im2", "o1": 2, "o2": 1, "o3": 0},
                {"query": "im3", "a": "im5", "b": "im4", "o1": 0, "o2": 3, "o3": 1},
                {"query": "im0", "a": "im2", "b": "im3", "o1": 0, "o2": 0, "o3": 2}]
    triplet_file = jsonl(tmp_path / "triplets.jsonl", triplets)
    plot = tmp_path / "curves.png"
    result = stdout_json(vltools_cmd("score", "semantic", oracle, "--proxy", proxy, "--R", "1,2,5,20",
                                     "--triplets", triplet_file, "--plot", plot))
    assert result["R"] == [1, 2, 5]  # 11 database images per query: R = 20 is left out
    assert result["ndcg"] == pytest.approx({"1": 100.0, "2": 100.0, "5": 100.0})
    assert result["ndcg_auc"] == pytest.approx(100.0) and result["pcc_auc"] == pytest.approx(100.0)
    relevance = tfidf @ tfidf.T
    # the oracle picks the more relevant image: o_chosen / (o1 + o2 + o3); the all-"neither" triplet counts as 0
    first = 2 / 3 if relevance[0, 1] > relevance[0, 2] else 1 / 3
    second = 0 / 4 if relevance[3, 5] > relevance[3, 4] else 3 / 4
    assert result["user_agreement"] == pytest.approx(100 * (first + second + 0) / 3) and result["n_triplets"] == 3
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert vltools_cmd("score", "semantic", oracle, "--plot", plot, "--triplets", triplet_file).returncode == 2
    bad = jsonl(tmp_path / "bad_triplets.jsonl", [{**triplets[0], "o3": -1}])
    one_line_error(vltools_cmd("score", "semantic", oracle, "--triplets", bad), "bad_triplets.jsonl", "line 1", "o3")


def test_self_retrieval(tmp_path, vltools_cmd):
    logp = np.array([[-1.0, -2.0, -3.0], [-5.0, -4.0, -0.5]])
    path = tmp_path / "logp.h5"
    write_logp(path, logp, ["a", "b", "c"], ["a", "b"])
    result = stdout_json(vltools_cmd("score", "self-retrieval", path))
    assert result == pytest.approx({"R@1": 50.0, "R@5": 100.0, "R@50": 100.0, "R@500": 100.0, "medr": 1.0,
                                    "meanr": 1.5, "n_captions": 2, "n_images": 3})


def test_retrieval_refuses_captions_that_give_the_sims_captions_other_images(tmp_path, capsys):
    """--captions once overrode the sims file's /caption_image_ids silently (same ids, other images)."""
    from vltools.cli import main

    path = tmp_path / "sims.h5"
    write_sims(path, np.eye(2, 3), ["a", "b"], ["c0", "c1", "c2"], ["a", "b", "b"])
    swapped = jsonl(tmp_path / "swapped.jsonl", [{"image_id": i, "caption": "x", "caption_id": f"c{n}"}
                                                 for n, i in enumerate("aab")])
    with pytest.raises(SystemExit) as exit_info:
        main(["score", "retrieval", str(path), "--captions", str(swapped)])
    captured = capsys.readouterr()
    assert exit_info.value.code == 1 and captured.out == "" and captured.err.count("\n") == 1
    assert ("swapped.jsonl: caption 'c1' is of image 'a', but " in captured.err
            and "sims.h5 ranked it as a caption of 'b'" in captured.err)
