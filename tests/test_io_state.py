"""vltools' own state files through one validated reader: a malformed one is one line naming it, what is wrong and
how to repair it (once a JSONDecodeError traceback)."""

from __future__ import annotations

import pytest

from vltools.errors import VLToolsError
from vltools.io.state import read_state


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
