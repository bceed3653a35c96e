"""Records given in memory become temporary files for the readers of files, gone when the block ends, and an error
about such a file names the argument and the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vltools.errors import ArgumentError, VLToolsError
from vltools.io.held import in_memory
from vltools.io.spooled import spooled

RECORDS = [{"image_id": "1", "caption": "a dog"}, {"image_id": 2, "caption": "två katter"}]


def test_what_counts_as_records_in_memory():
    assert in_memory(RECORDS) and in_memory(tuple(RECORDS)) and in_memory({"annotations": []})
    assert not any(in_memory(value) for value in ([], "caps.jsonl", Path("caps.jsonl"), [RECORDS[0], "x"], None))


def test_paths_pass_through_and_records_are_written_as_their_file_until_the_block_ends():
    with spooled({"predictions": RECORDS, "refs": "refs.jsonl", "coco": {"annotations": RECORDS}}) as files:
        assert files["refs"] == "refs.jsonl"
        predictions, coco = Path(files["predictions"]), Path(files["coco"])
        assert predictions.name == "predictions.jsonl" and coco.name == "coco.json"
        assert [json.loads(line) for line in predictions.read_text(encoding="utf-8").splitlines()] == RECORDS
        assert json.loads(coco.read_text(encoding="utf-8")) == {"annotations": RECORDS}
    assert not predictions.exists() and not predictions.parent.exists()
    with spooled({"refs": "refs.jsonl"}) as files:
        assert files == {"refs": "refs.jsonl"}


def test_an_error_about_a_written_file_names_the_argument_and_the_record():
    with pytest.raises(VLToolsError) as error, spooled({"refs": RECORDS, "other": "o.jsonl"}) as files:
        raise VLToolsError(f"{files['refs']}: line 2: no 'caption' field; see {files['refs']} and o.jsonl")
    assert str(error.value) == "refs[1]: no 'caption' field; see refs (in memory) and o.jsonl"


def test_a_value_json_cannot_hold_is_the_argument_s_error():
    with pytest.raises(ArgumentError) as error, spooled({"refs": [RECORDS[0], {"image_id": {1, 2}}]}):
        pass
    assert str(error.value) == ("refs [1] cannot be written as JSON (Object of type set is not JSON serializable); "
                                "give plain str, int, float, list and dict values")
