"""The report's content from hand-made rankings, captions, pairs and a proxy: truth, ranks, relevance, sampling."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.hdf5 import write_arrays
from vltools.io.records import write_records
from vltools.reporting.gallery import (
    caption_section,
    choose,
    parse_queries,
    ranking_sections,
    read_item_scores,
    read_references,
    read_scores,
)


@pytest.fixture
def files(tmp_path):
    captions = tmp_path / "caps.jsonl"
    write_records(captions, [{"image_id": "a", "caption": "a red disc"}, {"image_id": "a", "caption": "red disc"},
                             {"image_id": "b", "caption": "a blue square", "caption_id": "b-0"},
                             {"image_id": "c", "caption": "green star"}])
    rankings = tmp_path / "ranks.jsonl"
    write_records(rankings, [
        {"query": "a", "direction": "i2t", "ids": ["b-0", "a#1", "c#0", "a#0"], "scores": [0.9, 0.8, 0.5, 0.1]},
        {"query": "b", "direction": "i2t", "ids": ["a#0", "a#1", "c#0", "b-0"], "scores": [0.9, 0.7, 0.6, 0.2]},
        {"query": "c", "direction": "i2t", "ids": ["a#0", "a#1"], "scores": [0.3, 0.2]},
        {"query": "a#1", "direction": "t2i", "ids": ["a", "b", "c"], "scores": [3.0, 2.0, 1.0]},
        {"query": "c#0", "direction": "t2i", "ids": ["a", "b", "c"], "scores": [3.0, 2.0, 1.0]},
    ])
    return tmp_path, captions, rankings


def test_i2t_and_t2i_cards_mark_the_truth_and_the_first_correct_rank(files):
    _, captions, rankings = files
    i2t, t2i = ranking_sections(str(rankings), read_references(str(captions), None), None, 0, 0, 2, None, None, set())
    assert (i2t.kind, t2i.kind, i2t.total, t2i.total) == ("i2t", "t2i", 3, 2)
    a, b, c = i2t.cards
    assert [(r["id"], r["text"], r["ok"]) for r in a["results"]] == [("b-0", "a blue square", False),
                                                                     ("a#1", "red disc", True)]
    assert a["first"] == 2 and "first_result" not in a
    assert a["truth"] == ["a red disc", "red disc"]
    assert b["first"] == 4 and b["first_result"] == {"rank": 4, "id": "b-0", "text": "a blue square", "score": 0.2,
                                                     "ok": True}
    assert c["first"] is None and c["listed"] == 2
    assert i2t.keys == {"rank of the first correct answer": [2, 4, None]}
    first, second = t2i.cards
    assert first["text"] == "red disc" and first["first"] == 1 and first["truth_image"]["id"] == "a"
    assert [r["ok"] for r in first["results"]] == [True, False] and second["first"] == 3
    assert first["results"][0]["image"] == {"image": "a"}


def test_without_captions_the_truth_is_unknown(files):
    _, _, rankings = files
    i2t, _ = ranking_sections(str(rankings), read_references(None, None), None, 0, 0, 2, None, None, set())
    assert i2t.note.startswith("no --captions")
    assert all(card["first"] is None and card["unknown"] for card in i2t.cards)


def test_i2i_relevance_is_the_tfidf_dot_product_and_heatmaps_are_found(tmp_path):
    ids = ["q", "x", "y", "z"]
    vectors = np.array([[3.0, 4.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows, cols = np.nonzero(vectors)
    proxy = tmp_path / "proxy.h5"
    write_arrays(proxy, "proxy", {"ids": ids, "tfidf/data": vectors[rows, cols].astype(np.float32),
                                  "tfidf/indices": cols.astype(np.int32),
                                  "tfidf/indptr": np.searchsorted(rows, np.arange(5)).astype(np.int64),
                                  "tfidf/shape": np.array([4, 3])})
    rankings = tmp_path / "i2i.jsonl"
    write_records(rankings, [{"query": "q", "direction": "i2i", "ids": ["z", "x", "y"], "scores": [0.9, 0.5, 0.1]}])
    heatmaps = tmp_path / "heat"
    (heatmaps / "q").mkdir(parents=True)
    (heatmaps / "q__x.png").write_bytes(b"png")
    (heatmaps / "q" / "y.jpg").write_bytes(b"jpg")
    (section,) = ranking_sections(str(rankings), read_references(None, None), None, 0, 0, 3, str(proxy),
                                  str(heatmaps), set())
    results = section.cards[0]["results"]
    assert [r["relevance"] for r in results] == pytest.approx([0.0, 0.8, 0.6], abs=1e-6)  # (3,4,0)/5 . e_j
    assert [r.get("heatmap") for r in results] == [None, {"file": str(heatmaps / "q__x.png")},
                                                   {"file": str(heatmaps / "q" / "y.jpg")}]
    assert section.keys == {"mean proxy relevance of the results": [pytest.approx(1.4 / 3, abs=1e-6)]}


def test_choose_samples_in_input_order_with_a_seed_or_takes_the_ids_asked_for():
    ids = [f"q{i}" for i in range(50)]
    picked = choose(ids, None, 10, seed=1)
    assert len(picked) == 10 and picked == sorted(picked) and picked == choose(ids, None, 10, seed=1)
    assert picked != choose(ids, None, 10, seed=2)
    assert choose(ids, None, 0, 0) == list(range(50)) == choose(ids, None, 80, 0)
    assert choose(ids, {"q7", "q3", "nope"}, 10, 0) == [3, 7]
    assert choose(["c1", "c2", "c3"], {"imgB"}, 10, 0, also={"c2": "imgB", "c3": "imgA"}) == [1]


def test_parse_queries(tmp_path):
    listed = tmp_path / "ids.txt"
    listed.write_text("a\n\nb#1\n", encoding="utf-8")
    assert parse_queries(f"@{listed}") == {"a", "b#1"}
    assert parse_queries(" a, b ,") == {"a", "b"}
    assert parse_queries(None) is None


def test_caption_sections_for_images_and_pairs(tmp_path):
    captions = tmp_path / "caps.jsonl"
    write_records(captions, [{"image_id": "a", "caption": "a red disc"}, {"image_id": "a", "caption": "a disc"}])
    pairs = tmp_path / "pairs.jsonl"
    write_records(pairs, [{"pair_id": "p", "image_a": "a", "image_b": "b", "description": "b is blue"},
                          {"pair_id": "p", "image_a": "a", "image_b": "b", "description": "b has no disc"}])
    generated = tmp_path / "gen.jsonl"
    write_records(generated, [{"image_id": "a", "caption": "a disc"}, {"image_id": "z", "caption": "nothing"}])
    per_item = tmp_path / "per.jsonl"
    write_records(per_item, [{"image_id": "a", "CIDEr": 1.5, "SPICE": None}, {"image_id": "z", "CIDEr": 0.25}])
    described = tmp_path / "desc.jsonl"
    write_records(described, [{"pair_id": "p", "caption": "b is blue"}])
    refs = read_references(str(captions), str(pairs))
    section = caption_section(str(generated), str(per_item), refs, None, 0, 0, set())
    assert section.kind == "captions"
    assert section.cards[0] == {"id": "a", "caption": "a disc", "refs": ["a red disc", "a disc"],
                                "metrics": {"CIDEr": 1.5}, "image": {"image": "a"}}
    assert section.cards[1]["refs"] == [] and section.keys == {"CIDEr": [1.5, 0.25]}
    pair_section = caption_section(str(described), None, refs, None, 0, 0, set())
    assert pair_section.kind == "pairs" and pair_section.note.startswith("no --item-scores")
    assert pair_section.cards[0]["images"] == [{"image": "a"}, {"image": "b"}]
    assert pair_section.cards[0]["refs"] == ["b is blue", "b has no disc"]
    with pytest.raises(VLToolsError, match="need --pairs"):
        caption_section(str(described), None, read_references(str(captions), None), None, 0, 0, set())


def test_scores_and_item_scores_errors_are_one_line(tmp_path):
    bad = tmp_path / "scores.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(VLToolsError, match="not a JSON document"):
        read_scores(str(bad))
    bad.write_text(json.dumps([1, 2]), encoding="utf-8")
    with pytest.raises(VLToolsError, match="expected a JSON object"):
        read_scores(str(bad))
    per_item = tmp_path / "per.jsonl"
    per_item.write_text('{"image_id": "a", "CIDEr": 1}\n{"CIDEr": 2}\n', encoding="utf-8")
    with pytest.raises(VLToolsError, match="line 2: no 'image_id'"):
        read_item_scores(str(per_item))
