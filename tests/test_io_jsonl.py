"""The JSONL layer (vltools.io.jsonl): every JSON lines file vltools reads or writes goes through jsonlines, with
the bounded reader's checks (line length, UTF-8, depth) and errors naming the file and the line."""

from __future__ import annotations

import io
import json

import jsonlines
import pytest

from vltools.errors import VLToolsError
from vltools.io import bounded, jsonl
from vltools.io.jsonl import iter_json_lines, iter_lines, write_json_lines
from vltools.io.records import read_records, write_records


def test_records_are_read_and_written_through_jsonlines(tmp_path, monkeypatch):
    made = []

    class Reader(jsonlines.Reader):
        def __attrs_post_init__(self) -> None:
            made.append("reader")
            super().__attrs_post_init__()

    class Writer(jsonlines.Writer):
        def __attrs_post_init__(self) -> None:
            made.append("writer")
            super().__attrs_post_init__()

    monkeypatch.setattr(jsonl.jsonlines, "Reader", Reader)
    monkeypatch.setattr(jsonl.jsonlines, "Writer", Writer)
    path = tmp_path / "caps.jsonl"
    write_records(path, [{"image_id": "a", "caption": "a red cube"}])
    assert read_records(path, "captions") == [{"image_id": "a", "caption": "a red cube"}]
    assert made == ["writer", "reader"]


def test_values_come_with_their_line_numbers_blank_lines_skipped_and_null_kept(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n   \nnull\r\n[2, "\xc3\xa9"]\n')
    assert list(iter_json_lines(path, "give a log")) == [(1, {"a": 1}), (4, None), (5, [2, "é"])]


def test_a_malformed_line_names_the_file_the_line_and_the_column(tmp_path):
    path = tmp_path / "caps.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2,}\n', encoding="utf-8")
    with pytest.raises(VLToolsError, match=r"caps\.jsonl: line 3: malformed JSON \(.* at column 9\); fix it$"):
        list(iter_json_lines(path, "fix it"))


def test_without_a_fix_a_malformed_line_is_skipped(tmp_path):
    path = tmp_path / "out.partial"
    path.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c', encoding="utf-8")
    assert list(iter_json_lines(path, None)) == [(1, {"id": "a"}), (2, {"id": "b"})]


def test_without_a_fix_a_last_line_cut_inside_a_character_ends_the_reading(tmp_path):
    """A kill while `OUT.partial` was being appended can cut its last record inside a UTF-8 character: that record
    is computed again (with a fix, the same file is a one-line error)."""
    path = tmp_path / "out.partial"
    path.write_bytes('{"id": "a"}\n{"id": "b", "caption": "café'.encode()[:-1])
    assert list(iter_json_lines(path, None)) == [(1, {"id": "a"})]
    with pytest.raises(VLToolsError, match=r"out\.partial: line 2: not UTF-8 text"):
        list(iter_json_lines(path, "fix it"))


def test_a_line_nested_too_deep_is_malformed_json_naming_the_line(tmp_path):
    depth = bounded.MAX_JSON_DEPTH
    path = tmp_path / "deep.jsonl"
    path.write_text('{"a": 1}\n' + "[" * (depth + 1) + "]" * (depth + 1) + "\n", encoding="utf-8")
    with pytest.raises(VLToolsError, match=rf"deep\.jsonl: line 2: malformed JSON \(nested deeper than {depth} "
                                           rf"levels .* at column {depth + 1}\)"):
        list(iter_json_lines(path, "fix it"))


def test_a_line_over_the_cap_is_refused_before_jsonlines_gets_it(tmp_path, monkeypatch):
    monkeypatch.setattr(bounded, "MAX_LINE_BYTES", 64)
    path = tmp_path / "caps.jsonl"
    path.write_text('{"a": 1}\n' + json.dumps({"a": "x" * 1000}) + "\n", encoding="utf-8")
    with pytest.raises(VLToolsError, match=r"caps\.jsonl: line 2: longer than 0 MiB"):
        list(iter_json_lines(path, None))


def test_standard_input_is_read_for_a_dash(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b'{"a": 1}\n\n"b"\n')))
    assert list(iter_json_lines("-", "fix it")) == [(1, {"a": 1}), (3, "b")]


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(VLToolsError, match=r"nothing\.jsonl: no such file$"):
        list(iter_lines(tmp_path / "nothing.jsonl"))


def test_written_lines_keep_text_as_it_is_and_are_counted():
    stream = io.StringIO()
    assert write_json_lines(stream, [{"caption": "une tête", "n": 1}, [1.5]]) == 2
    assert stream.getvalue() == '{"caption": "une tête", "n": 1}\n[1.5]\n'


def test_a_given_dumps_makes_each_line():
    stream = io.StringIO()
    write_json_lines(stream, [{"loss": 0.1 + 0.2}], dumps=lambda value: json.dumps(value, sort_keys=True).upper())
    assert stream.getvalue() == '{"LOSS": 0.30000000000000004}\n'


def test_an_hdf5_file_is_called_hdf5_not_text_that_is_not_utf8(tmp_path):
    path = tmp_path / "emb.h5"
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)))
    for read in (lambda: list(iter_lines(path)), lambda: list(iter_json_lines(path, "fix it")),
                 lambda: read_records(path, "captions")):
        with pytest.raises(VLToolsError, match=rf"^{path}: HDF5, not JSON lines; give the JSON lines file here"):
            read()


def test_a_flickr_token_file_read_as_json_lines_names_its_converter(tmp_path):
    tokens = tmp_path / "Flickr8k.token.txt"
    tokens.write_text("1000268201_693b08cb0e.jpg#0\tA child in a pink dress .\n")
    with pytest.raises(VLToolsError, match=r"Flickr8k.token.txt: a Flickr token file \(IMAGE#N, a tab, a caption\), "
                                           r"not JSON lines; convert it first: vltools convert flickr "):
        list(iter_json_lines(tokens, "fix it"))
    assert [line for _, line in iter_lines(tokens)] == [tokens.read_text()]    # read as plain lines, as given
