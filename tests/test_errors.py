"""The user-facing error: the one exception class, the standard "file: where: problem; fix" message, the first
line of any exception, the short list of ids that error messages show, and what a path that is not a file is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vltools.errors import VLToolsError, first_line, input_error, require_file, shown, shown_ids


def test_vltools_error_is_an_ordinary_exception_carrying_its_message():
    assert issubclass(VLToolsError, Exception)
    with pytest.raises(VLToolsError) as caught:
        raise VLToolsError("caps.jsonl: no such file")
    assert str(caught.value) == "caps.jsonl: no such file"


def test_input_error_joins_file_where_problem_and_fix():
    error = input_error("caps.jsonl", "line 3", "malformed JSON", "fix or remove that line")
    assert isinstance(error, VLToolsError)
    assert str(error) == "caps.jsonl: line 3: malformed JSON; fix or remove that line"


def test_input_error_without_where_or_fix_leaves_them_out():
    assert str(input_error("sims.h5", None, "no /sims dataset")) == "sims.h5: no /sims dataset"
    assert str(input_error("sims.h5", "/sims", "contains NaN", None)) == "sims.h5: /sims: contains NaN"
    assert str(input_error("sims.h5", "/sims", "contains NaN", "")) == "sims.h5: /sims: contains NaN"


def test_input_error_accepts_a_path_object():
    path = Path("some") / "dir" / "feats.h5"
    assert str(input_error(path, "id 'x'", "bad row", "rerun")) == f"{path}: id 'x': bad row; rerun"


def test_first_line_keeps_only_the_first_line_of_the_message():
    exc = ValueError("\n  shape mismatch in layer 3\nsecond line\nthird line\n")
    assert first_line(exc) == "shape mismatch in layer 3"


def test_first_line_is_cut_to_160_characters():
    exc = RuntimeError("x" * 150 + "y" * 50 + "\nrest")
    assert first_line(exc) == "x" * 150 + "y" * 10
    assert len(first_line(exc)) == 160


def test_first_line_of_an_empty_message_is_the_class_name():
    assert first_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert first_line(OSError("  \n ")) == "OSError"


def test_first_line_of_a_key_error_is_its_quoted_key():
    assert first_line(KeyError("img7")) == "'img7'"


def test_shown_ids_quotes_every_id_up_to_the_limit():
    assert shown_ids(["a", "b"]) == "'a', 'b'"
    assert shown_ids(["a", "b", "c", "d", "e"]) == "'a', 'b', 'c', 'd', 'e'"
    assert shown_ids([]) == ""


def test_shown_ids_counts_the_ids_past_the_limit():
    ids = [f"img{i}" for i in range(8)]
    assert shown_ids(ids) == "'img0', 'img1', 'img2', 'img3', 'img4' and 3 more"
    assert shown_ids(ids, limit=2) == "'img0', 'img1' and 6 more"


def test_shown_ids_quotes_ids_holding_quotes_and_spaces_unambiguously():
    assert shown_ids(["it's", "a b"]) == "\"it's\", 'a b'"


def test_require_file_returns_a_regular_file_as_a_path(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    assert require_file(str(tmp_path / "a.txt")) == tmp_path / "a.txt"


def test_require_file_says_what_a_path_that_is_not_a_file_is(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(VLToolsError, match=r"pipe: is a named pipe, not a file; give a regular file$"):
        require_file(tmp_path / "pipe")
    with pytest.raises(VLToolsError, match=r"^/dev/null: is a device, not a file; give a regular file$"):
        require_file("/dev/null")
    with pytest.raises(VLToolsError, match=r": is a folder, not a file; give a JSONL$"):
        require_file(tmp_path, give="a JSONL")
    with pytest.raises(VLToolsError, match=r"missing.txt: no such config file$"):
        require_file(tmp_path / "missing.txt", "no such config file")


def test_shown_quotes_a_value_whole_when_short_and_a_prefix_of_one_however_large():
    assert [shown(value) for value in (None, -1, True, "a.h5", ["a", "b"], {"k": 1})] == \
        ["None", "-1", "True", "'a.h5'", "['a', 'b']", "{'k': 1}"]
    records = [{"image_id": str(k), "caption": "a dog " * 50} for k in range(100_000)]
    assert shown(records).startswith("a list of 100000 items, [{'caption': 'a dog a dog ")
    assert len(shown(records)) < 100 and len(shown("x" * 10**6)) <= 60 and len(shown(list(range(10**6)))) < 100
    assert shown(10**5000) == "an integer of about 5000 digits"
