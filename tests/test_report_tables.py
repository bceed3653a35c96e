"""The distinct-captions column of the examples' tables: counts, COLLAPSED rows and the notes naming the model."""

from __future__ import annotations

import json

from vltools.reporting.tables import WIDTH, SpreadColumn, read_spread


def write_captions(path, captions, key="image_id"):
    path.write_text("".join(json.dumps({key: f"i{n}", "caption": c}) + "\n" for n, c in enumerate(captions)),
                    encoding="utf-8")
    return path


def test_a_varied_captioner_shows_its_count_and_no_note(tmp_path):
    column = SpreadColumn()
    cell = column.cell("AdaptiveAttention", write_captions(tmp_path / "aa.caps.jsonl", ["a", "b", "c", "a", "d"]),
                       tmp_path / "aa.pt")
    assert cell == f"{'4/5':>{WIDTH}}"
    assert column.notes() == []


def test_one_caption_for_half_the_images_is_collapsed_and_names_the_model(tmp_path):
    column = SpreadColumn()
    captions = write_captions(tmp_path / "nt.caps.jsonl", ["a big star", "a big star", "a cross", "a big star"])
    assert column.cell("Neuraltalk2", captions, tmp_path / "nt.pt").split() == ["2/4", "COLLAPSED"]
    assert column.cell("NT / -", captions, tmp_path / "nt.pt").split() == ["2/4", "COLLAPSED"]  # same file again
    notes = column.notes()
    assert len(notes) == 1
    assert notes[0].startswith('COLLAPSED Neuraltalk2: nt.caps.jsonl says "a big star" for 3 of 4 images')
    assert f"look at {tmp_path / 'nt.pt'}" in notes[0]


def test_baselines_missing_files_and_rows_without_captions(tmp_path):
    column = SpreadColumn()
    most_frequent = write_captions(tmp_path / "mostfreq.jsonl", ["a star"] * 3, key="pair_id")
    assert column.cell("most frequent", most_frequent).split() == ["1/3", "COLLAPSED"]
    assert "for 3 of 3 pairs; a baseline: no model" in column.notes()[0]
    assert column.cell("missing", tmp_path / "absent.jsonl", tmp_path / "m.pt") == f"{'-':>{WIDTH}}"
    assert column.cell("chance", None) == " " * WIDTH


def test_read_spread_takes_the_first_caption_of_each_image(tmp_path):
    path = tmp_path / "caps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (
        {"image_id": "a", "caption": "one"}, {"image_id": "a", "caption": "two"},
        {"image_id": "b", "caption": "one"})), encoding="utf-8")
    spread, items = read_spread(path)
    assert (spread.distinct, spread.items, items) == (1, 2, "images")
