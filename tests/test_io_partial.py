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


def test_resume_refuses_other_options_or_inputs_and_keeps_the_file(tmp_path):
    out, model = tmp_path / "o.jsonl", tmp_path / "model.pt"
    model.write_bytes(b"weights")
    partial = PartialRecords(out, "image_id", False, {"--beam": 3}, {"--model": model})
    partial.add([{"image_id": "a", "caption": "x"}])
    before = partial.path.read_text()
    with pytest.raises(VLToolsError, match=r"used --beam 3, this run 5; resume with the same options and inputs, "
                                           r"or delete .*o\.jsonl\.partial and run without --resume"):
        PartialRecords(out, "image_id", True, {"--beam": 5}, {"--model": model})
    other = tmp_path / "other.pt"
    other.write_bytes(b"weights")
    with pytest.raises(VLToolsError, match=f"read --model {model}, this run {other}"):
        PartialRecords(out, "image_id", True, {"--beam": 3}, {"--model": other})
    model.write_bytes(b"retrained weights")
    with pytest.raises(VLToolsError, match=f"--model {model} changed since the interrupted run read it"):
        PartialRecords(out, "image_id", True, {"--beam": 3}, {"--model": model})
    assert partial.path.read_text() == before
    (tmp_path / "o.jsonl.partial").write_text('{"image_id": "a", "caption": "x"}\n')    # records but no state
    with pytest.raises(VLToolsError, match="does not record the options and inputs"):
        PartialRecords(out, "image_id", True, {"--beam": 3}, {"--model": model})


def test_a_failure_discards_a_partial_file_with_no_finished_record(tmp_path):
    out = tmp_path / "o.jsonl"
    with pytest.raises(RuntimeError), PartialRecords(out, "image_id", False, {"--beam": 3}):
        raise RuntimeError("decoding failed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError), PartialRecords(out, "image_id", False, {"--beam": 3}) as partial:
        partial.add([{"image_id": "a", "caption": "x"}])
        raise RuntimeError("decoding failed")
    assert PartialRecords(out, "image_id", True, {"--beam": 3}).done == {"a": {"image_id": "a", "caption": "x"}}
    (tmp_path / "o.jsonl.partial").write_text('{"resume_state": {"opt')    # killed before any record
    assert PartialRecords(out, "image_id", False).done == {}


def test_remove_drops_the_file_with_its_finished_records_and_a_failure_then_keeps_nothing(tmp_path):
    out = tmp_path / "o.jsonl"
    with pytest.raises(VLToolsError, match="refused"), PartialRecords(out, "image_id", resume=False) as partial:
        partial.add([{"image_id": "a", "caption": ""}])
        partial.remove()
        raise VLToolsError("refused")
    assert partial.done == {} and list(tmp_path.iterdir()) == []
    assert PartialRecords(out, "image_id", resume=False).done == {}      # no leftover blocks the next run
