"""vltools.eval.caption: reading every accepted layout, pairing predictions with references, hand-checked scores.

The published COCO demo numbers are reproduced end to end in tests/test_score_cli.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kill_helpers import kill, wait_until

from vltools.errors import VLToolsError
from vltools.eval.caption import (
    java_path,
    meteor_pairs,
    pair_predictions,
    ptb_tokenize,
    rouge_l,
    score_captions,
    treebank_tokenize,
)
from vltools.io.caption_files import read_caption_file

DATA = Path(__file__).parent / "data"


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path, records: list[dict]):
    return write(path, "".join(json.dumps(r) + "\n" for r in records))


def test_reads_jsonl_pairs_and_coco_layouts(tmp_path):
    captions = read_caption_file(jsonl(tmp_path / "c.jsonl", [{"image_id": "a", "caption": "x"},
                                                               {"image_id": "a", "caption": "y"}]))
    assert (captions.key, captions.texts) == ("image_id", {"a": ["x", "y"]})
    pairs = read_caption_file(jsonl(tmp_path / "p.jsonl", [
        {"pair_id": "p1", "image_a": "a", "image_b": "b", "description": "left is bigger"},
        {"pair_id": "p1", "image_a": "a", "image_b": "b", "description": "right is red"}]))
    assert (pairs.key, pairs.texts) == ("pair_id", {"p1": ["left is bigger", "right is red"]})
    predicted_pairs = read_caption_file(jsonl(tmp_path / "pp.jsonl", [{"pair_id": "p1", "caption": "bigger"}]))
    assert predicted_pairs.texts == {"p1": ["bigger"]}
    results = read_caption_file(write(tmp_path / "r.json", json.dumps([{"image_id": 42, "caption": "a cat"}])))
    assert results.texts == {"42": ["a cat"]}
    annotations = {"images": [{"id": 42, "file_name": "x.jpg"}],
                   "annotations": [{"image_id": 42, "id": 1, "caption": "A cat."},
                                   {"image_id": 42, "id": 2, "caption": "A kitten."}]}
    refs = read_caption_file(write(tmp_path / "a.json", json.dumps(annotations)))
    assert refs.texts == {"42": ["A cat.", "A kitten."]}


def test_reading_errors(tmp_path):
    with pytest.raises(VLToolsError, match="empty"):
        read_caption_file(write(tmp_path / "empty.jsonl", "\n"))
    with pytest.raises(VLToolsError, match="line 2.*'pair_id'"):
        read_caption_file(jsonl(tmp_path / "mixed.jsonl", [{"image_id": "a", "caption": "x"},
                                                           {"pair_id": "p", "caption": "y"}]))
    with pytest.raises(VLToolsError, match="line 1.*caption"):
        read_caption_file(jsonl(tmp_path / "notext.jsonl", [{"image_id": "a"}]))
    with pytest.raises(VLToolsError, match="no such file"):
        read_caption_file(tmp_path / "absent.jsonl")


def test_pairing_names_missing_and_duplicate_ids(tmp_path):
    refs = read_caption_file(jsonl(tmp_path / "refs.jsonl", [{"image_id": i, "caption": "x"} for i in "abc"]))
    predictions = read_caption_file(jsonl(tmp_path / "pred.jsonl", [{"image_id": "b", "caption": "y"}]))
    assert pair_predictions(predictions, refs) == ({"b": "y"}, {"b": ["x"]})
    missing = read_caption_file(jsonl(tmp_path / "m.jsonl", [{"image_id": i, "caption": "y"} for i in "aqz"]))
    with pytest.raises(VLToolsError, match="2 predicted image_ids have no reference.*'q', 'z'"):
        pair_predictions(missing, refs)
    twice = read_caption_file(jsonl(tmp_path / "d.jsonl", [{"image_id": "a", "caption": "y"},
                                                           {"image_id": "a", "caption": "z"}]))
    with pytest.raises(VLToolsError, match="line 1, line 2.*several predictions.*'a'"):
        pair_predictions(twice, refs)


def test_missing_java_names_the_package(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(VLToolsError, match="apt-get install default-jre-headless"):
        java_path()


def test_treebank_tokens_equal_stanfords_on_real_captions_without_java(monkeypatch):
    """The 1000 raw COCO demo captions and the Flickr8k sample's, through Stanford's PTBTokenizer (Java) and
    through treebank_tokenize, which runs with no java on PATH."""
    results = json.loads((DATA / "coco_caption" / "captions_val2014_fakecap_results.json").read_text(encoding="utf-8"))
    lines = (DATA / "convert" / "flickr8k" / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines()
    texts = {"coco": [r["caption"] for r in results], "flickr": [line.split("\t", 1)[1] for line in lines]}
    stanford = ptb_tokenize(texts)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert treebank_tokenize(texts) == stanford
    assert treebank_tokenize({"a": ['A man (left) says "hi", then waves...', "It can't be 1,000 dogs; no!"]}) == \
        {"a": ["a man -lrb- left -rrb- says hi then waves", "it ca n't be 1,000 dogs no"]}


def test_hand_checked_scores():
    # "a man riding a horse ." -> PTB tokens: a man riding a horse (5 words; the full stop is removed)
    # refs: "a man rides a horse", "a person on a horse"
    # unigrams: a, a, man, horse match (riding does not): 4/5; bigrams: "a man", "a horse" of 4: 2/4
    # closest reference length 5 = candidate length: no brevity penalty.  BLEU-2 = sqrt(4/5 * 2/4)
    # ROUGE-L: LCS with ref 1 = "a man a horse" (4): P = R = 4/5 -> F = 0.8 (ref 2 LCS is 3)
    # second image: the prediction equals its only reference: every per-item BLEU and ROUGE-L is 1
    scores = score_captions({"1": "a man riding a horse .", "2": "Two dogs play in the snow"},
                            {"1": ["A man rides a horse.", "a person on a horse"],
                             "2": ["two dogs play in the snow"]})
    first, second = scores.per_item["1"], scores.per_item["2"]
    assert first["Bleu_1"] == pytest.approx(0.8, abs=1e-6)
    assert first["Bleu_2"] == pytest.approx(math.sqrt(0.8 * 0.5), abs=1e-6)
    assert first["ROUGE_L"] == pytest.approx(0.8)
    assert second["Bleu_4"] == pytest.approx(1.0, abs=1e-6) and second["ROUGE_L"] == pytest.approx(1.0)
    assert 0 < first["METEOR"] < second["METEOR"] <= 1
    assert scores.bleu_counts["testlen"] == 5 + 6 and scores.bleu_counts["reflen"] == 5 + 6
    assert scores.bleu_counts["correct"][:2] == [4 + 6, 2 + 5]
    assert scores.metrics["ROUGE_L"] == pytest.approx((0.8 + 1.0) / 2)
    assert set(scores.metrics) == {"Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr"}


def test_rouge_l_is_the_lcs_f_measure_with_beta_1_2():
    # "a b c" vs "a c": LCS 2, precision 2/3, recall 1; pycocoevalcap's F with beta 1.2; best reference counts
    p, r, beta = 2 / 3, 1.0, 1.2
    expected = (1 + beta ** 2) * p * r / (r + beta ** 2 * p)
    assert abs(rouge_l({"x": "a b c"}, {"x": ["a c", "d"]}) - expected) < 1e-9
    assert rouge_l({"x": "same words", "y": "a b c"}, {"x": ["same words"], "y": ["a c"]}) == \
        pytest.approx((1 + expected) / 2)


def test_empty_references_are_kept_with_a_warning_refused_when_strict_and_empty_predictions_counted(tmp_path,
                                                                                                     caplog):
    refs = read_caption_file(jsonl(tmp_path / "refs.jsonl", [{"image_id": "a", "caption": "x"},
                                                             {"image_id": "b", "caption": " "},
                                                             {"image_id": "c", "caption": ""}]))
    predictions = read_caption_file(jsonl(tmp_path / "pred.jsonl", [{"image_id": i, "caption": "y"} for i in "ab"]))
    with pytest.raises(VLToolsError, match=r"refs.jsonl: line 2: empty reference for image_id 'b' \(1 empty"):
        pair_predictions(predictions, refs, strict=True)
    assert pair_predictions(predictions, refs) == ({"a": "y", "b": "y"}, {"a": ["x"], "b": [" "]})
    assert "refs.jsonl: 1 empty or blank references of predicted image_ids ('b')" in caplog.text
    caplog.clear()
    blank = read_caption_file(jsonl(tmp_path / "blank.jsonl", [{"image_id": "a", "caption": ""}]))
    assert pair_predictions(blank, refs, strict=True) == ({"a": ""}, {"a": ["x"]})  # c's empty reference is unused
    assert "blank.jsonl: 1 of 1 predictions are empty or blank (first: image_id 'a')" in caplog.text
    assert "blank references" not in caplog.text


def test_an_empty_reference_scores_as_pycocoevalcap_scores_it(tmp_path):
    """The COCO server's code (PTB tokenizer, then each scorer) called directly on the same captions."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.meteor.meteor import Meteor
    from pycocoevalcap.rouge.rouge import Rouge
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    references = {"1": ["A man rides a horse.", ""], "2": ["two dogs play in the snow", "dogs in snow"],
                  "3": ["a cat on a mat"]}
    predicted = {"1": "a man riding a horse .", "2": "Two dogs play", "3": "a cat sits on the mat"}
    refs = read_caption_file(jsonl(tmp_path / "refs.jsonl", [{"image_id": i, "caption": text}
                                                             for i, texts in references.items() for text in texts]))
    predictions = read_caption_file(jsonl(tmp_path / "pred.jsonl", [{"image_id": i, "caption": text}
                                                                    for i, text in predicted.items()]))
    scores = score_captions(*pair_predictions(predictions, refs))
    tokenizer = PTBTokenizer()
    gts = tokenizer.tokenize({i: [{"caption": t} for t in texts] for i, texts in references.items()})
    res = tokenizer.tokenize({i: [{"caption": text}] for i, text in predicted.items()})
    bleu = Bleu(4).compute_score(gts, res, verbose=0)[0]
    expected = dict(zip(("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4"), bleu, strict=True))
    expected["METEOR"] = Meteor().compute_score(gts, res)[0]  # its __del__ ends the java process
    expected["ROUGE_L"] = Rouge().compute_score(gts, res)[0]
    expected["CIDEr"] = Cider().compute_score(gts, res)[0]
    assert scores.metrics == pytest.approx(expected, abs=1e-9)
    assert scores.per_item["1"]["CIDEr"] > 0


def test_meteor_pairs_equal_pycocoevalcaps_meteor_of_each_pair_alone(caplog):
    """Real COCO captions (a generated one against three of its references, and references against each other),
    each pair also scored alone by pycocoevalcap's own Meteor: one compute_score call per pair."""
    from pycocoevalcap.meteor.meteor import Meteor

    entries = json.loads((DATA / "coco_caption" / "fakecap_1000_tokenized_refs_and_tests.spice_input.json")
                         .read_text(encoding="utf-8"))[:4]
    pairs = [(entry["test"], ref) for entry in entries for ref in entry["refs"][:3]]
    pairs += [(entries[0]["refs"][1], entries[0]["refs"][0]), (entries[0]["refs"][0], entries[0]["refs"][1]),
              ("A man rides a horse.", "a man riding a horse"), pairs[0]]
    caplog.set_level("INFO", logger="vltools")
    scores = meteor_pairs(pairs, chunk=5)    # three chunks: the chunk boundary is crossed
    reference = Meteor()
    expected = {(h, r): reference.compute_score({"0": [r]}, {"0": [h]})[1][0] for h, r in pairs}
    assert scores == pytest.approx(expected, abs=1e-12)
    assert len(scores) == len(pairs) - 1
    assert scores[pairs[12]] != scores[pairs[13]]    # the argument order matters: hypothesis, then reference
    assert "METEOR: 16 sentence pairs, 15 distinct" in caplog.text


def stand_in_java(folder: Path, script: str) -> Path:
    """A `java` on PATH that runs the shell `script` instead of METEOR's jar."""
    java = folder / "java"
    java.write_text(f"#!/bin/sh\n{script}\n")
    java.chmod(0o755)
    return java


@pytest.mark.parametrize(("error", "advice"), [
    ("Error: could not find libjava.so", "install a Java runtime: apt-get install"),
    ("Error: Could not reserve enough space for 2097152KB object heap", "METEOR asks for 2 GB of memory"),
])
def test_a_java_that_ends_at_once_is_reported_as_it_ended(tmp_path, monkeypatch, error, advice):
    """Every failure of METEOR's java was put down to its 2 GB, also a java that could not start at all."""
    java = stand_in_java(tmp_path, f'echo "{error}" >&2; exit 3')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(VLToolsError) as failed:
        meteor_pairs([("a dog", "a cat")])
    message = str(failed.value)
    assert message.startswith(f"METEOR's java process ({java}) ended with exit status 3 before scoring: {error}; "
                              f"{advice}")
    assert ("2 GB" in message) == ("memory" in advice) and "\n" not in message


def test_meteor_s_java_process_dies_with_a_killed_stage(tmp_path):
    """The jar reads nothing while it loads its tables, so the end of its input did not end it: a killed stage
    left it running (here a java that never reads its input, as the jar while it loads)."""
    started = tmp_path / "java.pid"
    stand_in_java(tmp_path, f'echo $$ > "{started}"; exec "{sys.executable}" -c "import signal; signal.pause()"')
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    stage = subprocess.Popen([sys.executable, "-c", "from vltools.eval.caption import meteor_pairs; "
                                                    "meteor_pairs([('a dog', 'a cat')])"],
                             env=env, stderr=subprocess.PIPE)
    wait_until(stage, lambda: started.exists() and started.read_text().strip() != "")
    java = int(started.read_text())
    kill(stage)
    try:
        deadline = time.monotonic() + 30
        while running(java) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not running(java)
    finally:
        if running(java):
            os.kill(java, 9)


def running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
