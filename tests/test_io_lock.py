"""vltools.io.lock: one writer per output, the lock taken once by a stage's entry."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vltools.errors import VLToolsError
from vltools.io.lock import output_lock
from vltools.io.output import written

HOLD_OUTPUT = """
import sys
from vltools.io.lock import output_lock
from vltools.io.output import written
target = sys.argv[1]
with output_lock(None if target == "-" else target), written(None if target == "-" else target) as tmp:
    tmp.write_bytes(b"half")
    print(tmp, file=sys.stderr, flush=True)
    sys.stdin.read()  # hold the output until the test closes stdin or kills this process
"""


def _holder(tmp_path, target: str, stdout=None) -> tuple[subprocess.Popen, Path]:
    """A second process in the middle of writing `target`; returns it and its temporary file."""
    script = tmp_path / "hold.py"
    script.write_text(HOLD_OUTPUT)
    process = subprocess.Popen([sys.executable, str(script), target], stdin=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdout=stdout)
    line = process.stderr.readline().decode().strip()
    assert line, process.communicate()[1].decode()
    return process, Path(line)


def test_a_second_writer_of_the_same_output_stops_naming_the_first(tmp_path):
    target = tmp_path / "out.h5"
    process, _ = _holder(tmp_path, str(target))
    try:
        with pytest.raises(VLToolsError, match=rf"out.h5: another process is writing it \(pid {process.pid} "), \
                output_lock(target):
            pass
    finally:
        process.communicate(b"")
    assert target.read_bytes() == b"half" and sorted(p.name for p in tmp_path.iterdir()) == ["hold.py", "out.h5"]


def test_a_killed_writer_leaves_no_output_and_the_next_run_cleans_up(tmp_path):
    target = tmp_path / "out.h5"
    process, tmp = _holder(tmp_path, str(target))
    process.kill()
    process.wait()
    assert tmp.exists() and Path(f"{target}.lock").exists() and not target.exists()
    with output_lock(target), written(target) as path:
        path.write_bytes(b"whole")
    assert target.read_bytes() == b"whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hold.py", "out.h5"]


def test_a_lock_is_taken_once_an_output_named_twice_is_refused_and_the_lock_released(tmp_path):
    target = tmp_path / "t.pt"
    with output_lock(target, None, "-"), written(target) as tmp:
        tmp.write_text("x")
        assert Path(f"{target}.lock").exists()
        with pytest.raises(VLToolsError, match=r"t.pt: this run writes it twice \(named as two outputs\)"), \
                output_lock(target):
            pass
        assert Path(f"{target}.lock").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.pt"]
    with pytest.raises(VLToolsError, match="this run writes it twice"), output_lock(target, target):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.pt"]


def test_locks_work_without_hard_links(tmp_path, monkeypatch):
    def no_link(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    target = tmp_path / "out.txt"
    with output_lock(target):
        assert json.loads(Path(f"{target}.lock").read_text())["pid"] == os.getpid()
    assert list(tmp_path.iterdir()) == []
