"""vltools.io.output: the one output mechanism (a temporary or a spool, then commit or discard)."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.features import FeaturesReader
from vltools.io.output import Output, text_output, written, written_folder

WRITE_FEATURES_TO_STDOUT = """
import numpy as np
from vltools.io.output import written
from vltools.io.features import FeaturesWriter
with written(None) as tmp, FeaturesWriter(tmp, {"backbone": "test"}, dtype="float32") as writer:
    writer.add(["a", "b"], regions=np.arange(24, dtype=np.float32).reshape(2, 3, 4))
"""


def test_a_file_output_lands_on_success_and_is_dropped_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    with written(target) as tmp:
        tmp.write_text("done")
        assert not target.exists()
    assert target.read_text() == "done"
    with pytest.raises(RuntimeError), written(tmp_path / "bad.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_missing_folder_is_a_user_error(tmp_path):
    with pytest.raises(VLToolsError, match="does not exist"), written(tmp_path / "no" / "x.h5"):
        pass


def test_text_output_to_file(tmp_path):
    with text_output(tmp_path / "t.jsonl") as stream:
        stream.write("x\n")
    assert (tmp_path / "t.jsonl").read_text() == "x\n"


@pytest.mark.parametrize("shell", ["{py} > {out}", "{py} | cat > {out}"])
def test_hdf5_to_stdout_redirect_and_pipe_read_back_identically(tmp_path, shell):
    script = tmp_path / "w.py"
    script.write_text(WRITE_FEATURES_TO_STDOUT)
    out = tmp_path / "f.h5"
    subprocess.run(shell.format(py=f"{sys.executable} {script}", out=out), shell=True, check=True)
    with FeaturesReader(out) as reader:
        assert reader.ids == ["a", "b"]
        np.testing.assert_array_equal(reader.read(["b"])["regions"][0], np.arange(12, 24).reshape(3, 4))


def test_hdf5_to_a_terminal_is_refused(monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    with pytest.raises(VLToolsError, match="refusing to write HDF5 to a terminal"), written(None):
        pass


def test_os_errors_on_output_are_one_line_naming_it(tmp_path):
    target = tmp_path / "full.h5"
    with pytest.raises(VLToolsError, match=r"full.h5: cannot write \(No space left on device\)"), \
            written(target):
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(VLToolsError, match=r"full.h5: cannot write \(Permission denied\)"), \
            written(target) as tmp:
        raise OSError(f"Unable to create file (unable to open file: name = '{tmp}', errno = 13, error message = "
                      "'Permission denied', flags = 13)")
    with pytest.raises(FileNotFoundError), written(target):  # about another file: not the output's fault
        open(tmp_path / "missing-input")
    assert list(tmp_path.iterdir()) == []


def test_a_device_output_is_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    with written(fifo) as tmp:
        tmp.write_bytes(b"through the pipe")
    assert reader.communicate()[0] == b"through the pipe"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"] and Path(fifo).is_fifo()
    with text_output("/dev/null") as stream:
        stream.write("nothing")
    assert Path("/dev/null").is_char_device()


def test_a_folder_output_lands_whole_or_not_at_all(tmp_path):
    out = tmp_path / "site"
    with written_folder(out, False, lambda p: True, "site", "index.html") as staging:
        (staging / "index.html").write_text("one")
        assert not out.exists()
    assert (out / "index.html").read_text() == "one"
    with pytest.raises(RuntimeError), written_folder(out, True, lambda p: True, "site", "index.html") as staging:
        (staging / "index.html").write_text("two")
        raise RuntimeError("killed")
    assert (out / "index.html").read_text() == "one"
    with pytest.raises(VLToolsError, match="not empty"), written_folder(out, False, lambda p: True, "site", "x"):
        pass
    with pytest.raises(VLToolsError, match=r"only an earlier site \(index.html\)"):
        with written_folder(out, True, lambda p: False, "site", "index.html"):
            pass
    with written_folder(out, True, lambda p: True, "site", "index.html") as staging:
        (staging / "index.html").write_text("three")
    assert (out / "index.html").read_text() == "three"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_a_folder_output_refuses_a_symbolic_link_before_touching_anything(tmp_path):
    """Replacing a linked folder once renamed the link, then failed ("Cannot call rmtree on a symbolic link")
    and left `.OUT.old-PID` behind."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "index.html").write_text("earlier")
    (tmp_path / "site").symlink_to(real)
    for force in (True, False):
        with pytest.raises(VLToolsError, match=rf"site: is a symbolic link \(to {real}\); give the folder itself"):
            with written_folder(tmp_path / "site", force, lambda p: True, "site", "index.html"):
                pytest.fail("the block must not run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real", "site"]
    assert (tmp_path / "site").is_symlink() and (real / "index.html").read_text() == "earlier"


def test_an_output_object_commits_or_discards_and_removes_a_killed_writers_temporary(tmp_path):
    target = tmp_path / "out.txt"
    stale = tmp_path / "out.txt.tmp-999999"
    stale.write_text("left by a killed run")
    kept = Output(target)
    assert not stale.exists() and kept.path.parent == tmp_path
    kept.path.write_text("kept")
    kept.commit()
    dropped = Output(target)
    dropped.path.write_text("dropped")
    dropped.discard()
    assert target.read_text() == "kept" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
