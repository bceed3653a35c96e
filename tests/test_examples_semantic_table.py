"""examples/semantic/table.py on a small proxy and made-up score files: a row given once per seed prints its mean and
spread, and the table says how the caption tf-idf counted each image's words."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from vltools.cli import cli

TABLE = Path(__file__).parent.parent / "examples" / "semantic" / "table.py"
WORDS = ["dog", "cat", "tree", "car", "beach", "horse"]


def proxy(folder: Path, *options: str) -> Path:
    """A tf-idf proxy of 12 training and 8 test images, two captions each."""
    with open(folder / "caps.jsonl", "w") as stream:
        for i in range(20):
            for j in range(2):
                caption = f"a {WORDS[(i + j) % 6]} and a {WORDS[(2 * i + j) % 6]}"
                stream.write(json.dumps({"image_id": f"im{i}", "caption": caption,
                                         "split": "train" if i < 12 else "test"}) + "\n")
    path = folder / f"proxy{len(options)}.h5"
    result = CliRunner().invoke(cli, ["--quiet", "tfidf-proxy", str(folder / "caps.jsonl"), "--k", "3", *options,
                                      "-o", str(path)])
    assert result.exit_code == 0, result.output
    return path


def score(path: Path, agreement: float, ndcg: float = 50.0) -> str:
    path.write_text(json.dumps({"ndcg_auc": ndcg, "pcc_auc": 10.0, "user_agreement": agreement}))
    return str(path)


def table(folder: Path, proxy_path: Path, scores: dict[str, tuple[float, float]] | None = None) -> list[str]:
    """The printed table; `scores` gives some rows' (user agreement, NDCG AUC), the others get (55, 50)."""
    triplets = folder / "study.jsonl"
    triplets.write_text("".join(json.dumps({"query": f"im{12 + i}", "a": f"im{13 + i}", "b": f"im{14 + i}",
                                            "o1": 3, "o2": 1, "o3": 1}) + "\n" for i in range(5)))
    rows = [f"{name}={score(folder / f'{name}.json', *(scores or {}).get(name, (55.0, 50.0)))}" for name in
            ("oracle", "baseline", "wsabie", "v", "vt", "vtt", "objects", "meteor", "generated")]
    rows += [f"word2vec={score(folder / f'w2v{seed}.json', value)}" for seed, value in enumerate((60.0, 62.0, 64.0))]
    out = subprocess.run([sys.executable, str(TABLE), "title", *rows, "--proxy", str(proxy_path), "--triplets",
                          str(triplets)], capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def test_the_word2vec_row_prints_its_spread_over_seeds_and_the_words_counting_is_said(tmp_path):
    lines = table(tmp_path, proxy(tmp_path))
    word2vec = [line for line in lines if line.startswith("Human captions: word2vec + FV")]
    # mean and population standard deviation of 60, 62, 64: 62.0 and sqrt(8 / 3) = 1.63
    assert len(word2vec) == 1 and word2vec[0].startswith("Human captions: word2vec + FV (x3)"), lines
    assert "62.0 +- 1.6" in word2vec[0] and "70.1" in word2vec[0]
    assert any(line.startswith("Human captions: tf-idf ") and " 55.0 " in line for line in lines)
    assert lines[-1] == ("Caption tf-idf (--proxy): each image's words counted once (its captions' words as a "
                         "single set, as in the paper)")


def test_a_proxy_counting_occurrences_is_said_to(tmp_path):
    lines = table(tmp_path, proxy(tmp_path, "--words", "occurrences"))
    assert lines[-1] == "Caption tf-idf (--proxy): each image's words counted once per occurrence"


def test_direction_lines_compare_the_papers_claims_with_r_mac(tmp_path):
    lines = table(tmp_path, proxy(tmp_path), {"oracle": (70.0, 100.0), "baseline": (60.0, 45.0), "v": (58.0, 40.0)})
    # the made-up score files record no test size: the lines say so rather than guess a noise band
    assert ("direction (Table 1, user agreement): Human captions: tf-idf 70.0 against R-MAC 60.0: above R-MAC, as "
            "the paper's Table 1; test size not recorded, so no noise band") in lines
    assert ("direction (Table 2, NDCG AUC): Proposed (V, V) 40.0 against R-MAC 45.0: NOT above R-MAC here; test size "
            "not recorded, so no noise band") in lines


def load_table():
    spec = importlib.util.spec_from_file_location("semantic_table", TABLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_direction_sets_the_margin_against_one_test_item_with_the_test_size():
    directions = load_table().directions
    results = {"oracle": [{"user_agreement": 62.0, "n_triplets": 40}],
               "baseline": [{"user_agreement": 60.0, "n_triplets": 40, "ndcg_auc": 45.0, "n_queries": 200}],
               "v": [{"ndcg_auc": 45.3, "n_queries": 200}]}
    table1, table2 = directions(results)
    # one of 40 triplets = 2.5 points: a 2.0-point lead is within noise; one of 200 queries = 0.5: 0.3 is within too
    assert table1 == ("direction (Table 1, user agreement): Human captions: tf-idf 62.0 against R-MAC 60.0: above "
                      "R-MAC, as the paper's Table 1; margin +2.0, within noise (under one test triplet = 2.5 points) "
                      "(test: 40 triplets)")
    assert table2.endswith("; margin +0.3, within noise (under one test query = 0.5 points) (test: 200 queries)")
    results["v"] = [{"ndcg_auc": 50.0, "n_queries": 200}]
    assert directions(results)[1].endswith("; margin +5.0, beyond one test query = 0.5 points (test: 200 queries)")


def test_direction_of_a_row_given_once_per_seed_uses_the_seeds_spread():
    results = {"baseline": [{"ndcg_auc": 45.0, "n_queries": 200}],
               "v": [{"ndcg_auc": value, "n_queries": 200} for value in (44.0, 47.0, 50.0)]}
    # mean 47.0, population std sqrt(6) = 2.45: a 2.0-point lead is within the seeds' spread
    (line,) = load_table().directions(results)
    assert line == ("direction (Table 2, NDCG AUC): Proposed (V, V) 47.0 against R-MAC 45.0: above R-MAC, as the "
                    "paper's Table 2; margin +2.0, within noise (under the seeds' spread, std 2.4) (test: 200 queries)")
