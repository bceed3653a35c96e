import json
import re

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.records import caption_ids, detect_kind, id_file_name, ranking_records, read_records, write_records

GOOD = {
    "captions": {"image_id": "a", "caption": "a red circle", "split": "train", "caption_id": "a#0"},
    "regions": {"image_id": "a", "caption": "red circle", "box": [1, 2, 30, 40], "region_id": "r1"},
    "pairs": {"pair_id": "p1", "image_a": "a", "image_b": "b", "description": "left is red", "split": "test"},
    "rankings": {"query": "a", "direction": "i2t", "ids": ["a#0", "b#0"], "scores": [0.9, 0.1]},
    "images": {"image_id": "a", "path": "images/a.png", "boxes": [[0, 0, 5, 5]]},
}
REQUIRED = {"captions": "caption", "regions": "box", "pairs": "image_b", "rankings": "ids", "images": "path"}


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_valid_records_round_trip(tmp_path, kind):
    records = [dict(GOOD[kind])]
    write_records(tmp_path / "x.jsonl", records)
    assert read_records(tmp_path / "x.jsonl", kind) == records
    assert detect_kind(records[0]) == kind


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_malformed_line_names_file_and_line(tmp_path, kind):
    lines = [json.dumps(GOOD[kind])] + ['{"image_id": "b", broken']
    write_lines(tmp_path / "x.jsonl", lines)
    with pytest.raises(VLToolsError, match=r"x\.jsonl: line 2: malformed JSON"):
        read_records(tmp_path / "x.jsonl", kind)


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_missing_field_names_the_field(tmp_path, kind):
    record = dict(GOOD[kind])
    del record[REQUIRED[kind]]
    write_lines(tmp_path / "x.jsonl", [json.dumps(record)])
    with pytest.raises(VLToolsError, match=rf"line 1: missing field '{REQUIRED[kind]}'"):
        read_records(tmp_path / "x.jsonl", kind)


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_mistyped_field_names_the_field(tmp_path, kind):
    record = dict(GOOD[kind])
    record[REQUIRED[kind]] = 7
    write_lines(tmp_path / "x.jsonl", [json.dumps(GOOD[kind]), json.dumps(record)])
    with pytest.raises(VLToolsError, match=rf"line 2: field '{REQUIRED[kind]}' must be"):
        read_records(tmp_path / "x.jsonl", kind)


@pytest.mark.parametrize("kind", sorted(GOOD))
def test_empty_file_is_an_error(tmp_path, kind):
    (tmp_path / "x.jsonl").write_text("\n")
    with pytest.raises(VLToolsError, match="empty file"):
        read_records(tmp_path / "x.jsonl", kind)


@pytest.mark.parametrize("kind", ["captions", "regions", "rankings", "images", "pairs"])
def test_duplicate_ids_are_errors(tmp_path, kind):
    write_lines(tmp_path / "x.jsonl", [json.dumps(GOOD[kind])] * 2)
    with pytest.raises(VLToolsError, match="line 2: duplicate"):
        read_records(tmp_path / "x.jsonl", kind)


def test_numeric_image_id_is_a_type_error(tmp_path):
    write_lines(tmp_path / "x.jsonl", [json.dumps({"image_id": 42, "caption": "x"})])
    with pytest.raises(VLToolsError, match="field 'image_id' must be a string"):
        read_records(tmp_path / "x.jsonl", "captions")


def test_rankings_lengths_and_direction_checked(tmp_path):
    bad = dict(GOOD["rankings"], scores=[0.5])
    write_lines(tmp_path / "x.jsonl", [json.dumps(bad)])
    with pytest.raises(VLToolsError, match="different lengths"):
        read_records(tmp_path / "x.jsonl", "rankings")
    write_lines(tmp_path / "y.jsonl", [json.dumps(dict(GOOD["rankings"], direction="sideways"))])
    with pytest.raises(VLToolsError, match="use one of i2t, t2i, i2i"):
        read_records(tmp_path / "y.jsonl", "rankings")


def test_encoding_problems_name_the_line_and_a_bom_is_accepted(tmp_path):
    good = json.dumps(GOOD["captions"]).encode()
    (tmp_path / "x.jsonl").write_bytes(good + b'\n{"image_id": "\xff"}\n')
    with pytest.raises(VLToolsError, match=r"x.jsonl: line 2: not UTF-8 text \(invalid start byte at byte 15 of"):
        read_records(tmp_path / "x.jsonl", "captions")
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + good + b"\n")
    assert read_records(tmp_path / "bom.jsonl", "captions") == [GOOD["captions"]]
    (tmp_path / "tab.jsonl").write_bytes(b'{"image_id": "a\tb", "caption": "x"}\n')
    with pytest.raises(VLToolsError, match=r"line 1: malformed JSON \(Invalid control character at column 16\)"):
        read_records(tmp_path / "tab.jsonl", "captions")


def test_writer_leaves_nothing_on_failure(tmp_path):
    def records():
        yield GOOD["captions"]
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_records(tmp_path / "out.jsonl", records())
    assert list(tmp_path.iterdir()) == []


def test_caption_ids_fall_back_to_image_and_index():
    records = [{"image_id": "a", "caption": "x"}, {"image_id": "b", "caption": "y", "caption_id": "own"},
               {"image_id": "a", "caption": "z"}]
    assert caption_ids(records) == ["a#0", "own", "a#1"]


def test_an_explicit_caption_id_equal_to_a_generated_one_is_refused():
    records = [{"image_id": "a", "caption": "x"}, {"image_id": "b", "caption": "y", "caption_id": "a#0"}]
    with pytest.raises(VLToolsError, match="caps.jsonl: caption 2 and caption 1 both have the id 'a#0'"):
        caption_ids(records, "caps.jsonl")


def test_an_empty_h5_file_is_not_called_an_empty_jsonl(tmp_path):
    (tmp_path / "feats.h5").write_bytes(b"")
    with pytest.raises(VLToolsError, match=r"feats.h5: not an HDF5 file \(empty, or no HDF5 signature\)"):
        read_records(tmp_path / "feats.h5", "captions")


def test_iter_json_lines_numbers_lines_and_reports_malformed_json(tmp_path):
    from vltools.io.records import iter_json_lines

    path = tmp_path / "log.jsonl"
    path.write_text('{"a": 1}\n\n[2, 3]\n{oops\n', encoding="utf-8")
    found = []
    with pytest.raises(VLToolsError, match=r"log.jsonl: line 4: malformed JSON .*; give a log"):
        for item in iter_json_lines(path, "give a log"):
            found.append(item)
    assert found == [(1, {"a": 1}), (3, [2, 3])]


@pytest.mark.parametrize(("kind", "name", "value"), [
    ("captions", "image_id", "a\x00b"), ("captions", "caption_id", "a#\n0"), ("pairs", "image_b", "b\x1b[2J"),
    ("rankings", "ids", ["a#0", "b\x7f"]), ("images", "image_id", "\x85x"),
])
def test_a_control_character_in_an_id_is_refused_naming_line_and_field(tmp_path, kind, name, value):
    """Ids become file names (explain, report) and lines; a NUL in one once reached `explain` as a path."""
    path = tmp_path / "bad.jsonl"
    write_lines(path, [json.dumps(GOOD[kind]), json.dumps({**GOOD[kind], "caption_id": "z", name: value})])
    with pytest.raises(VLToolsError, match=rf"bad.jsonl: line 2: field '{name}' holds the control character"):
        read_records(path, kind)


def test_captions_may_hold_control_characters_but_blank_ones_are_counted_once(tmp_path, caplog):
    path = tmp_path / "caps.jsonl"
    write_lines(path, [json.dumps({"image_id": "a", "caption": text}) for text in ("tab\there", "", "  ", "ok")])
    assert [r["caption"] for r in read_records(path, "captions")] == ["tab\there", "", "  ", "ok"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [f"{path}: 2 of 4 records have an empty or blank caption (first on line 2)"]


@pytest.mark.parametrize(("ids", "name"), [
    (["a", "b"], "a__b.png"), (["../../x", "y"], "_._.._x__y.png"), (["/etc/passwd"], "_etc_passwd.png"),
    ([".hidden", "b"], "_hidden__b.png"), (["..", ".."], "_.__...png"), (["a\\b"], "a_b.png"),
])
def test_id_file_names_stay_inside_their_folder(tmp_path, ids, name):
    assert id_file_name(ids, ".png") == name
    assert (tmp_path / name).resolve().parent == tmp_path.resolve()


def test_an_id_file_name_too_long_for_a_file_system_is_cut_and_hashed(tmp_path):
    long = id_file_name(["é" * 300, "b"], ".png")
    assert len(long.encode()) <= 255 and long.endswith(".png") and long != id_file_name(["é" * 300, "c"], ".png")
    (tmp_path / long).write_bytes(b"")


@pytest.mark.parametrize(("kind", "name", "value", "problem"), [
    ("captions", "caption_id", "cap\u202egpj.exe", "holds the bidirectional control U+202E"),
    ("captions", "image_id", "\u2067img", "holds the bidirectional control U+2067"),
])
def test_a_bidirectional_control_in_an_id_is_refused(tmp_path, kind, name, value, problem):
    path = tmp_path / "bad.jsonl"
    write_lines(path, [json.dumps(GOOD[kind]), json.dumps({**GOOD[kind], "caption_id": "z", name: value})])
    with pytest.raises(VLToolsError, match=rf"bad.jsonl: line 2: field '{name}' {re.escape(problem)}; ids name"):
        read_records(path, kind)


def test_rankings_records_drop_missing_results():
    values = np.array([[0.9, 0.5, -np.inf]], dtype=np.float32)
    indices = np.array([[2, 0, -1]])
    (record,) = ranking_records(["q"], ["a", "b", "c"], values, indices, "i2t")
    assert record == {"query": "q", "direction": "i2t", "ids": ["c", "a"], "scores": [pytest.approx(0.9),
                                                                                     pytest.approx(0.5)]}


@pytest.mark.parametrize(("line", "problem"), [
    ('{"image_id": "a", "caption": "x \\ud800"}', r"a lone surrogate \\ud800 that UTF-8 cannot hold at column 33"),
    ('{"image_id": "a\\udcff", "caption": "x"}', r"a lone surrogate \\udcff"),    # a name that was not UTF-8
    ('{"image_id": "a", "caption": "x", "box": [1, 2, 3, ' + "9" * 4000 + "]}", "an integer over 1.8e308"),
    ('{"image_id": "a", "caption": "x", "split": "train", "split": "test"}', "a duplicate key 'split'"),
])
def test_a_line_no_writer_could_write_back_is_refused_naming_file_and_line(tmp_path, line, problem):
    path = tmp_path / "regions.jsonl"
    path.write_text('{"image_id": "a", "caption": "y", "box": [1, 2, 3, 4]}\n' + line + "\n")
    with pytest.raises(VLToolsError, match=f"^{re.escape(str(path))}: line 2: malformed JSON \\({problem}"):
        read_records(path, "regions")
