"""The one id check: every source of ids (JSONL fields, file and folder names, list lines, tar members) uses it."""

from __future__ import annotations

import os

import pytest

from vltools.io.ids import escaped_id, id_problem, ids_problem


@pytest.mark.parametrize(("text", "problem"), [
    ("a\tb.jpg", "holds the control character '\\t'"), ("a\x1b[2J.jpg", "holds the control character '\\x1b'"),
    ("line\nbreak", "holds the control character '\\n'"), ("nul\x00", "holds the control character '\\x00'"),
    ("\x85next", "holds the control character '\\x85'"),
    ("cat\u202egpj.exe", "holds the bidirectional control U+202E"),
    ("\u2066iso\u2069", "holds the bidirectional control U+2066"),
    ("mark\u200f", "holds the bidirectional control U+200F"),
    ("arabic\u061c", "holds the bidirectional control U+061C"),
    ("emb\u202a", "holds the bidirectional control U+202A"),
    (os.fsdecode(b"\xff\xfe.jpg"), "is not UTF-8"), ("lone\ud800", "is not UTF-8"),
])
def test_unusable_ids_are_named_with_their_problem(text, problem):
    assert id_problem(text) == problem


@pytest.mark.parametrize("text", ["a#0", "sub/déjà/ünï.png", "שלום.jpg", "日本 語.png", "emoji 🐦.jpg", ""])
def test_ordinary_ids_in_any_script_pass(text):
    assert id_problem(text) is None and escaped_id(text) == text


def test_escaped_ids_are_usable_and_show_the_name_they_stand_for():
    assert escaped_id(os.fsdecode(b"\xff\xfe.jpg")) == "\\xff\\xfe.jpg"
    assert escaped_id("a\tb\x1b\n\u202ec.jpg") == "a\\tb\\x1b\\n\\u202ec.jpg"
    assert escaped_id("lone\ud800") == "lone\\ud800"
    assert id_problem(escaped_id("a\tb\u202e\udcff")) is None


def test_an_id_list_in_memory_names_its_first_duplicate_unless_ids_may_repeat():
    assert ids_problem(["a", "b", "c", "b", "a"]) == ": duplicate id 'b' (rows 1 and 3); ids must be unique"
    assert ids_problem(["a", "b", "a"], unique=False) is None and ids_problem(iter(["a", "b"])) is None


def test_an_id_list_in_memory_gets_the_id_rule_of_files_naming_the_row():
    assert ids_problem(["a", "b\x1b]0;title\x07"]) == \
        ("[1] 'b\\x1b]0;title\\x07' holds the control character '\\x1b', which an id cannot; ids name files and lines: "
         "remove it")
    assert ids_problem(["ok", "nul\0"], unique=False).startswith("[1] 'nul\\x00' holds the control character")
    assert ids_problem(["x\u2066"]).startswith("[0] 'x\\u2066' holds the bidirectional control U+2066")
