"""`vltools explain` turns ids into file names: an id with a control character is refused when the rankings are
read (before the model is loaded), and every name it writes stays inside its output folder."""

from __future__ import annotations

import json

import pytest

from vltools.cli import main


def test_an_id_with_a_nul_is_refused_naming_the_rankings_line(tmp_path, capsys):
    """A NUL in an image id once reached explain as a file name (ValueError traceback)."""
    rankings = tmp_path / "i2i.jsonl"
    rankings.write_text(json.dumps({"query": "a", "direction": "i2i", "ids": ["b\x00c"], "scores": [0.5]}) + "\n",
                        encoding="utf-8")
    out = tmp_path / "out"
    unread = tmp_path / "unread.pt"     # a checkpoint by its first bytes, never loaded: the rankings are read first
    unread.write_bytes(b"PK\x03\x04")
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", str(rankings), "--model", str(unread), "--images", str(tmp_path), "-o", str(out)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err == (f"vltools: error: {rankings}: line 1: field 'ids' holds the control "
                                                 "character '\\x00'; ids name files and lines: remove it\n")
    assert not out.exists()
