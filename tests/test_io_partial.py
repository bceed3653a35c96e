"""Resumable JSONL outputs: a cut last line is dropped, finished records kept, OUT written in the given order."""

from __future__ import annotations

import json

import pytest

from vltools.errors import VLToolsError
from vltools.io.partial import PartialRecords


def test_resume_finish_and_refusal(tmp_path):
    out = tmp_path / "o.jsonl"
    partial = PartialRecords(out, "image_id", resume=False)
    partial.add([{"image_id": "b", "caption": "x"}])
    (tmp_path / "o.jsonl.partial").write_text((tmp_path / "o.jsonl.partial").read_text() + '{"image_id": "c", "ca')
    with pytest.raises(VLToolsError, match="--resume"):
        PartialRecords(out, "image_id", resume=False)
    again = PartialRecords(out, "image_id", resume=True)
    assert list(again.done) == ["b"]
    again.add([{"image_id": "a", "caption": "y"}, {"image_id": "c", "caption": "z"}])
    assert not out.exists()
    assert again.finish(["a", "b", "c"]) == 3
    assert [json.loads(line)["image_id"] for line in out.read_text().splitlines()] == ["a", "b", "c"]
    assert not (tmp_path / "o.jsonl.partial").exists()
