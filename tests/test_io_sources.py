"""The converters' shared readers: line splitting, id lists, split lists, JSON errors."""

from __future__ import annotations

import pytest

from vltools.errors import ArgumentError, VLToolsError
from vltools.io.sources import load_json, numbered_lines, read_class_names, read_id_list, split_assignments


def test_lines_split_on_newline_only(tmp_path):
    path = tmp_path / "caps.txt"
    path.write_bytes("a man\u2028on a bike .\r\nsecond\x0cline\nthird".encode())
    assert list(numbered_lines(path)) == [(1, "a man\u2028on a bike ."), (2, "second\x0cline"), (3, "third")]


def test_non_utf8_names_the_line(tmp_path):
    path = tmp_path / "caps.txt"
    path.write_bytes(b"fine\nalso fine\nbad \xff byte\n")
    with pytest.raises(VLToolsError, match=r"caps.txt: line 3: not UTF-8 text"):
        list(numbered_lines(path))


def test_id_lists_and_split_assignment(tmp_path):
    train, test = tmp_path / "train.txt", tmp_path / "test.txt"
    train.write_text("a.jpg\n\nb.jpg\n")
    test.write_text("c.jpg\n")
    assert read_id_list(train) == ["a.jpg", "b.jpg"]
    assert split_assignments({"train": train, "test": test}) == {"a.jpg": "train", "b.jpg": "train", "c.jpg": "test"}
    assert split_assignments([("train", train), ("test", test)]) == split_assignments({"train": train, "test": test})
    train.write_text("a.jpg\nb.jpg\na.jpg\n")
    with pytest.raises(VLToolsError, match=r"train.txt: line 3: id 'a.jpg' repeats line 1"):
        read_id_list(train)


def test_a_split_named_twice_is_refused_before_any_list_is_read(tmp_path):
    with pytest.raises(ArgumentError, match=r"^split_files names split 'test' twice; give one file per split$"):
        split_assignments([("test", tmp_path / "absent.txt"), ("test", tmp_path / "absent.txt")])


def test_json_errors_name_line_and_column(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"images": [\n  {"a": 1},\n  {"b": }\n]}')
    with pytest.raises(VLToolsError, match=r"d.json: line 3 column 9: malformed JSON"):
        load_json(path)
    with pytest.raises(VLToolsError, match="missing.json: no such file"):
        load_json(tmp_path / "missing.json")


def test_class_names_are_the_first_name_of_each_line_without_the_background(tmp_path):
    path = tmp_path / "objects_vocab.txt"
    path.write_text("man\nt-shirt,tee shirt\nteddy bear\n\n", encoding="utf-8")
    assert read_class_names(path, 3) == ["man", "t-shirt", "teddy bear"]
    path.write_text("__background__\nman\nt-shirt\nteddy bear\n", encoding="utf-8")
    assert read_class_names(path, 3) == ["man", "t-shirt", "teddy bear"]
    with pytest.raises(VLToolsError, match=r"objects_vocab.txt: 4 class names, but the detector has 2 classes"):
        read_class_names(path, 2)
    path.write_text("man\n\nteddy bear\n", encoding="utf-8")
    with pytest.raises(VLToolsError, match=r"objects_vocab.txt: line 2: blank line"):
        read_class_names(path, 3)
