"""data/caption_scores: caption metrics of files, the predictions' key, and the refusals before any Java runs."""

from __future__ import annotations

import json

import pytest

from vltools.data.caption_scores import score_caption_files
from vltools.errors import VLToolsError


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_identical_prediction_scores_one_and_the_key_is_the_predictions(tmp_path):
    refs = _jsonl(tmp_path / "refs.jsonl", [{"pair_id": "p", "description": "the left bird is larger"}])
    predictions = _jsonl(tmp_path / "p.jsonl", [{"pair_id": "p", "caption": "the left bird is larger"}])
    scores, key = score_caption_files(predictions, refs, spice=False, meteor=False)
    assert key == "pair_id"
    assert scores.metrics["Bleu_4"] == pytest.approx(1.0) and scores.metrics["ROUGE_L"] == pytest.approx(1.0)
    assert list(scores.per_item) == ["p"]


def test_a_prediction_without_reference_is_refused(tmp_path):
    refs = _jsonl(tmp_path / "refs.jsonl", [{"image_id": "1", "caption": "a dog"}])
    predictions = _jsonl(tmp_path / "p.jsonl", [{"image_id": "2", "caption": "a dog"}])
    with pytest.raises(VLToolsError, match=r"p\.jsonl: 1 predicted image_ids have no reference"):
        score_caption_files(predictions, refs, spice=False, meteor=False)


def test_a_skipped_spice_is_null_with_its_reason(tmp_path, monkeypatch):
    """SPICE skipped for its missing models left no key in the scores: a table could not tell it from forgotten."""
    import vltools.data.caption_scores as caption_scores

    refs = _jsonl(tmp_path / "refs.jsonl", [{"image_id": "1", "caption": "a dog on the grass"}])
    predictions = _jsonl(tmp_path / "p.jsonl", [{"image_id": "1", "caption": "a dog"}])
    monkeypatch.setattr(caption_scores, "spice_missing", lambda: "the models are not installed")
    scores, _ = score_caption_files(predictions, refs, meteor=False)
    assert scores.metrics["SPICE"] is None and scores.metrics["skipped"] == {"SPICE": "the models are not installed"}
    asked, _ = score_caption_files(predictions, refs, spice=False, meteor=False)
    assert "SPICE" not in asked.metrics and "skipped" not in asked.metrics
