"""Caption files for scoring: JSONL records and COCO JSON (annotations or results) read into the same grouped
CaptionFile, and every problem reported on one line naming the file and the line (or entry)."""

from __future__ import annotations

import json

import pytest

from vltools.errors import VLToolsError
from vltools.io.caption_files import CaptionFile, read_caption_file


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path, records: list) -> object:
    return write(path, "".join(json.dumps(r) + "\n" for r in records))


def one_line_error(path, match: str) -> str:
    """The message of reading `path`: one line, starting with the file, matching `match`."""
    with pytest.raises(VLToolsError, match=match) as caught:
        read_caption_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message
    return message


def test_jsonl_and_coco_annotations_read_into_the_same_caption_file(tmp_path):
    lines = jsonl(tmp_path / "refs.jsonl", [{"image_id": 42, "caption": "A cat."},
                                            {"image_id": "7", "caption": "A dog."},
                                            {"image_id": 42, "caption": "A kitten."}])
    coco = write(tmp_path / "refs.json", json.dumps({
        "images": [{"id": 42, "file_name": "42.jpg"}, {"id": 7, "file_name": "7.jpg"}],
        "annotations": [{"image_id": 42, "id": 1, "caption": "A cat."},
                        {"image_id": 7, "id": 2, "caption": "A dog."},
                        {"image_id": 42, "id": 3, "caption": "A kitten."}]}))
    from_lines, from_coco = read_caption_file(lines), read_caption_file(coco)
    expected = {"42": ["A cat.", "A kitten."], "7": ["A dog."]}
    assert isinstance(from_lines, CaptionFile) and isinstance(from_coco, CaptionFile)
    assert (from_lines.key, from_lines.texts) == ("image_id", expected)
    assert (from_coco.key, from_coco.texts) == ("image_id", expected)
    assert list(from_lines.texts) == list(from_coco.texts) == ["42", "7"]    # ids in order of first mention
    assert from_lines.path == str(lines) and from_coco.path == str(coco)
    assert from_lines.where == {"42": ["line 1", "line 3"], "7": ["line 2"]}
    assert from_coco.where == {"42": ["entry 0", "entry 2"], "7": ["entry 1"]}


def test_coco_results_list_reads_like_jsonl_predictions(tmp_path):
    results = write(tmp_path / "results.json", json.dumps([{"image_id": 3, "caption": "a red circle"},
                                                           {"image_id": 1, "caption": "a blue square"}]))
    predictions = jsonl(tmp_path / "pred.jsonl", [{"image_id": "3", "caption": "a red circle"},
                                                  {"image_id": 1, "caption": "a blue square"}])
    assert read_caption_file(results).texts == read_caption_file(predictions).texts == {
        "3": ["a red circle"], "1": ["a blue square"]}


def test_pair_descriptions_blank_lines_and_a_single_record_file(tmp_path):
    path = write(tmp_path / "pairs.jsonl", "\n" + json.dumps({"pair_id": "p1", "description": "left is big"})
                 + "\n   \n" + json.dumps({"pair_id": "p1", "caption": "right is red"}) + "\n")
    pairs = read_caption_file(path)
    assert (pairs.key, pairs.texts) == ("pair_id", {"p1": ["left is big", "right is red"]})
    assert pairs.where == {"p1": ["line 2", "line 4"]}          # physical line numbers, blanks counted
    single = jsonl(tmp_path / "one.jsonl", [{"image_id": "a", "caption": "x"}])    # one JSON object, not COCO
    assert read_caption_file(single).texts == {"a": ["x"]}


def test_malformed_json_names_file_line_and_column(tmp_path):
    path = write(tmp_path / "c.jsonl", '{"image_id": "a", "caption": "x"}\n\n{"image_id": "b", "caption": }\n')
    message = one_line_error(path, "line 3: malformed JSON")
    assert "column 30" in message
    assert message.endswith("fix or remove that line")


@pytest.mark.parametrize("record,match", [
    (["a", "x"], "line 2: expected a JSON object"),
    ({"caption": "x"}, "line 2: no 'image_id' or 'pair_id' field"),
    ({"image_id": "a"}, "line 2: no string 'caption' \\(or 'description'\\) field"),
    ({"image_id": "a", "caption": 3}, "line 2: no string 'caption'"),
    ({"image_id": True, "caption": "x"}, "line 2: id must be a string or an integer, found true"),
    ({"image_id": 1.5, "caption": "x"}, "line 2: id must be a string or an integer, found 1.5"),
    ({"pair_id": "p", "caption": "x"}, "line 2: record keyed by 'pair_id' but earlier ones by 'image_id'"),
])
def test_bad_records_are_refused_naming_file_and_line(tmp_path, record, match):
    path = jsonl(tmp_path / "c.jsonl", [{"image_id": "ok", "caption": "fine"}, record])
    one_line_error(path, match)


def test_empty_file_and_absent_file_are_refused_naming_them(tmp_path):
    one_line_error(write(tmp_path / "empty.jsonl", "\n \n"), "empty file: no captions")
    with pytest.raises(VLToolsError, match="absent.jsonl: no such file"):
        read_caption_file(tmp_path / "absent.jsonl")


def test_non_utf8_line_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"image_id": "a", "caption": "x"}\n{"image_id": "b", "caption": "caf\xe9"}\n')
    one_line_error(path, "line 2: not UTF-8 text")


def test_coco_errors_name_file_and_entry(tmp_path):
    unknown = write(tmp_path / "ann.json", json.dumps({
        "images": [{"id": 1, "file_name": "1.jpg"}],
        "annotations": [{"image_id": 1, "id": 1, "caption": "a cat"}, {"image_id": 9, "id": 2, "caption": "a"}]}))
    one_line_error(unknown, r"annotations\[1\]: image_id 9 is not in 'images'")
    twice = write(tmp_path / "res.json", json.dumps([{"image_id": 1, "caption": "a"},
                                                     {"image_id": 1, "caption": "b"}]))
    one_line_error(twice, r"\[1\]: .*image_id 1")
