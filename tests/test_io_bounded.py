"""The bounded readers: JSON nested too deep, over-long lines and tar members whose header claims too much are
one-line errors before Python recurses or allocates (they were RecursionError and MemoryError)."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from vltools.cli import main
from vltools.errors import VLToolsError
from vltools.io import bounded
from vltools.io.bounded import MAX_JSON_DEPTH, member_bytes, parse_json, text_lines


def test_json_nested_deeper_than_the_limit_is_a_decode_error_at_the_first_bracket_too_deep():
    with pytest.raises(json.JSONDecodeError, match=r"^nested deeper than 100 levels .*: line 2 column 106") as caught:
        parse_json('\n{"a": ' + "[" * 100_000)
    assert caught.value.pos == 7 + MAX_JSON_DEPTH - 1   # the object is the first level
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json(nested) == json.loads(nested)
    with pytest.raises(json.JSONDecodeError, match="^nested deeper"):
        parse_json("[" + nested + "]")
    # brackets inside strings, escaped quotes among them, are text
    assert parse_json(json.dumps({"a": "[" * 500 + '\\"[', "b": ["]" * 500]})) == {"a": "[" * 500 + '\\"[',
                                                                                   "b": ["]" * 500]}


def test_a_number_of_more_digits_than_python_converts_is_a_decode_error():
    with pytest.raises(json.JSONDecodeError, match=r"^a number of more than \d+ digits: line 1 column 7"):
        parse_json('{"n": ' + "1" * 5000 + "}")


def test_a_line_over_the_limit_is_refused_without_being_read_whole(monkeypatch):
    monkeypatch.setattr(bounded, "MAX_LINE_BYTES", 64)
    stream = io.BytesIO(b"short\n" + b"x" * 10_000 + b"\nafter\n")
    lines = text_lines(stream, "caps.jsonl")
    assert next(lines) == (1, "short\n")
    with pytest.raises(VLToolsError, match=r"^caps\.jsonl: line 2: longer than 0 MiB"):
        next(lines)
    assert stream.tell() == 6 + 65


def test_a_member_claiming_more_than_the_archive_holds_or_its_limit_is_refused_before_reading(tmp_path):
    archive = tmp_path / "a.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("k.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    with tarfile.open(archive) as tar:
        offset = tar.getmember("k.txt").offset_data
    with open(archive, "rb") as stream:
        assert member_bytes(stream, "k.txt", offset, 5) == b"hello"
        with pytest.raises(ValueError, match=r"^truncated tar archive: member k\.txt claims 8,589,934,592 bytes"):
            member_bytes(stream, "k.txt", offset, 8 << 30)
        with pytest.raises(ValueError, match=r"^member k\.txt claims 5 bytes, more than the 4 such a member"):
            member_bytes(stream, "k.txt", offset, 5, limit=4)


@pytest.mark.parametrize("record", ["[" * 100_000, '{"image_id": "a", "caption": "x", "n": ' + "[" * 100_000])
def test_inspect_of_a_jsonl_nested_too_deep_is_one_line(tmp_path, capsys, record):
    (tmp_path / "deep.jsonl").write_text(record + "\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["inspect", str(tmp_path / "deep.jsonl")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.count("\n") == 1
    assert err.startswith(f"vltools: error: {tmp_path / 'deep.jsonl'}: line 1: malformed JSON (nested deeper than")


@pytest.mark.parametrize(("text", "problem", "column"), [
    ('{"caption": "bad \\ud800 text"}', r"a lone surrogate \\ud800 that UTF-8 cannot hold", 18),
    ('["ok", "\\udc00"]', r"a lone surrogate \\udc00 that UTF-8 cannot hold", 9),
    ('{"box": [1, 2, 3, ' + "9" * 4000 + "]}", r"an integer over 1\.8e308 that no float holds", 19),
    ('{"split": "train", "caption": "x", "split": "test"}', "a duplicate key 'split' in one object", 36),
    ('[{"a": {"b": 1, "b": 2}}]', "a duplicate key 'b' in one object", 17),
])
def test_what_no_reader_could_use_is_a_decode_error_at_its_column(text, problem, column):
    """A lone surrogate was read, then failed in the tokenizer or the JSON lines writer (UnicodeEncodeError); a
    4,000-digit box coordinate was an OverflowError in the records reader; a key twice took its last value."""
    with pytest.raises(json.JSONDecodeError, match=f"^{problem}: line 1 column {column} "):
        parse_json(text)


def test_what_looks_like_those_but_is_not_is_read():
    assert parse_json('["\\ud83d\\ude00", "\\\\ud800", {"a": 1}, {"a": 2}]') == ["\U0001F600", "\\ud800", {"a": 1},
                                                                               {"a": 2}]
    assert parse_json("[" + "9" * 308 + ", 1e999]") == [int("9" * 308), float("inf")]
