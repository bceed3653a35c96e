"""data/semantic_scores: score semantic's computation over files, the one `vltools score semantic` and
`vltools.score_semantic` call: NDCG / PCC of a sims file, user agreement from a sims file and from i2i rankings
(the METEOR kernel's output), the text oracle from a proxy file, and the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vltools.data.semantic import build_proxy
from vltools.data.semantic_scores import score_semantic_file
from vltools.errors import VLToolsError
from vltools.io.proxy import write_proxy
from vltools.io.sims import write_sims

TEXTS = [["a red circle"], ["a red square"], ["a blue circle"], ["a green star"], ["a red circle and a star"],
         ["a blue square"], ["a green circle"], ["a red star"]]
IDS = [f"im{i}" for i in range(len(TEXTS))]
TRIPLETS = [{"query": "im0", "a": "im4", "b": "im5", "o1": 3, "o2": 1, "o3": 0},   # users: im4 (3 of 4)
            {"query": "im1", "a": "im3", "b": "im5", "o1": 0, "o2": 2, "o3": 2}]   # users: im5 (2 of 4)


@pytest.fixture
def files(tmp_path):
    proxy = build_proxy(IDS, ["test"] * len(IDS), TEXTS, "test", 3)
    write_proxy(tmp_path / "proxy.h5", proxy, {"method": "captions"})
    triplets = tmp_path / "triplets.jsonl"
    triplets.write_text("".join(json.dumps(t) + "\n" for t in TRIPLETS))
    return tmp_path / "proxy.h5", triplets


def test_agreement_of_a_sims_file_follows_its_choices(tmp_path, files):
    proxy, triplets = files
    sims = np.zeros((len(IDS), len(IDS)))
    sims[0, 4], sims[0, 5] = 0.9, 0.1      # chooses im4 with 3 of 4 users
    sims[1, 3], sims[1, 5] = 0.8, 0.2      # chooses im3 with none of the 2 deciding users
    write_sims(tmp_path / "s.h5", sims, IDS, IDS)
    result, kept = score_semantic_file(tmp_path / "s.h5", triplets=triplets)
    assert kept == [] and result == pytest.approx({"user_agreement": 100 * (3 / 4 + 0 / 4) / 2, "n_triplets": 2})


def test_rankings_give_the_same_agreement_as_the_matrix_they_list(tmp_path, files):
    _, triplets = files
    rankings = [{"query": "im0", "direction": "i2i", "ids": ["im5", "im4"], "scores": [0.7, 0.2]},
                {"query": "im1", "direction": "i2i", "ids": ["im5", "im3"], "scores": [0.5, 0.4]}]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rankings))
    result, _ = score_semantic_file(path, triplets=triplets)
    assert result["user_agreement"] == pytest.approx(100 * (1 / 4 + 2 / 4) / 2)


def test_the_proxy_file_is_the_text_oracle_with_perfect_ndcg(files):
    proxy, triplets = files
    result, kept = score_semantic_file(proxy, proxy, triplets, r_values=(1, 2, 5), queries=4)
    assert kept == [1, 2, 5] and result["ndcg_auc"] == pytest.approx(100.0) and result["n_queries"] == 4
    # the oracle prefers im4 ("a red circle and a star") to im5 for "a red circle": 3 of 4 users agree
    assert result["n_triplets"] == 2


def test_refusals_name_what_is_missing(files):
    proxy, _ = files
    with pytest.raises(VLToolsError, match="give a proxy for NDCG / PCC, user-study triplets"):
        score_semantic_file(proxy)
    with pytest.raises(VLToolsError, match="the NDCG / PCC curves need a proxy"):
        score_semantic_file(proxy, triplets=files[1], plot="x.png")
    with pytest.raises(VLToolsError, match="give increasing positive integers"):
        score_semantic_file(proxy, proxy, r_values=(5, 1))
