"""vltools' own state files through one validated reader: a malformed provenance sidecar is one line naming it,
what is wrong and how to repair it, in `inspect` and in `report` alike (once a JSONDecodeError traceback)."""

from __future__ import annotations

import json

import pytest

from vltools.errors import VLToolsError
from vltools.io.describe import describe
from vltools.io.state import read_sidecar, read_state
from vltools.reporting.gallery import file_summary


def test_read_state_names_the_file_the_problem_and_the_repair(tmp_path):
    path = tmp_path / "state.json"
    path.write_text('{"a": 1}')

    def has_a(data: object) -> str | None:
        return None if isinstance(data, dict) and "a" in data else "lacks 'a'"

    assert read_state(path, "the state", has_a, "delete it") == {"a": 1}
    path.write_text('{"b": 1}')
    with pytest.raises(VLToolsError, match=rf"^{path}: the state lacks 'a'; delete it$"):
        read_state(path, "the state", has_a, "delete it")
    with pytest.raises(VLToolsError, match=rf"^{tmp_path / 'absent.json'}: the state cannot be read "
                                           r"\(No such file or directory\); delete it$"):
        read_state(tmp_path / "absent.json", "the state", has_a, "delete it")


@pytest.mark.parametrize("text, problem", [
    ('{"command": ', "is not valid JSON (Expecting value at line 1 column 13)"),
    ("[1, 2]", "must be a JSON object of provenance, found list"),
    ("\udcff", "is not UTF-8 text"),
])
def test_a_malformed_sidecar_is_one_line_in_inspect_and_report(tmp_path, text, problem):
    captions = tmp_path / "caps.jsonl"
    captions.write_text(json.dumps({"image_id": "a", "caption": "a red circle"}) + "\n", encoding="utf-8")
    assert read_sidecar(captions) is None and "provenance" not in describe(captions)
    meta = tmp_path / "caps.jsonl.meta.json"
    meta.write_text('{"command": "vltools caption"}', encoding="utf-8")
    assert describe(captions)["provenance"] == file_summary(captions)["provenance"] == {"command": "vltools caption"}
    meta.write_bytes(text.encode("utf-8", "surrogateescape"))
    scores = tmp_path / "scores.json"    # not a vltools kind: report reads its sidecar directly
    scores.write_text('{"CIDEr": 1.0}', encoding="utf-8")
    (tmp_path / "scores.json.meta.json").write_bytes(meta.read_bytes())
    for call, path in ((describe, captions), (file_summary, captions), (file_summary, scores)):
        with pytest.raises(VLToolsError) as error:
            call(path)
        message = str(error.value)
        assert message.startswith(f"{path}.meta.json: the provenance sidecar {problem}"), message
        assert message.endswith(f"; delete it (it only records how {path.name} was made) or rerun the stage that "
                                "wrote it") and "\n" not in message
