import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.atomic import (
    DeferredWrites,
    atomic_folder,
    atomic_path,
    binary_output,
    check_room,
    output_lock,
    remove_stale_spools,
    signals_held,
    text_output,
)
from vltools.io.features import FeaturesReader

WRITE_FEATURES_TO_STDOUT = """
import numpy as np
from vltools.io.atomic import binary_output
from vltools.io.features import FeaturesWriter
with binary_output(None) as tmp, FeaturesWriter(tmp, {"backbone": "test"}, dtype="float32") as writer:
    writer.add(["a", "b"], regions=np.arange(24, dtype=np.float32).reshape(2, 3, 4))
"""


def test_atomic_path_renames_on_success_and_cleans_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    with atomic_path(target) as tmp:
        tmp.write_text("done")
        assert not target.exists()
    assert target.read_text() == "done"
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "bad.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_missing_folder_is_a_user_error(tmp_path):
    with pytest.raises(VLToolsError, match="does not exist"), atomic_path(tmp_path / "no" / "x.h5"):
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
    with pytest.raises(VLToolsError, match="refusing to write HDF5 to a terminal"), binary_output(None):
        pass


HOLD_OUTPUT = """
import sys
from vltools.io.atomic import atomic_path, binary_output
target = sys.argv[1]
with (binary_output(None) if target == "-" else atomic_path(target)) as tmp:
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
                atomic_path(target):
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
    with atomic_path(target) as path:
        path.write_bytes(b"whole")
    assert target.read_bytes() == b"whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hold.py", "out.h5"]


def test_a_killed_writer_to_stdout_leaves_a_spool_folder_the_next_run_removes(tmp_path):
    with open(tmp_path / "redirected", "wb") as stdout:
        process, spool = _holder(tmp_path, "-", stdout=stdout)
        process.kill()
        process.wait()
    assert spool.parent.name.startswith(f"vltools-{process.pid}-") and spool.exists()
    remove_stale_spools()
    assert not spool.parent.exists()


def test_locks_are_reentrant_in_a_process_and_released(tmp_path):
    target = tmp_path / "t.pt"
    with output_lock(target), atomic_path(target) as tmp:
        tmp.write_text("x")
        assert Path(f"{target}.lock").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.pt"]


def test_os_errors_on_output_are_one_line_naming_it(tmp_path):
    target = tmp_path / "full.h5"
    with pytest.raises(VLToolsError, match=r"full.h5: cannot write \(No space left on device\)"), \
            atomic_path(target):
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(VLToolsError, match=r"full.h5: cannot write \(Permission denied\)"), \
            atomic_path(target) as tmp:
        raise OSError(f"Unable to create file (unable to open file: name = '{tmp}', errno = 13, error message = "
                      "'Permission denied', flags = 13)")
    with pytest.raises(FileNotFoundError), atomic_path(target):  # about another file: not the output's fault
        open(tmp_path / "missing-input")
    assert list(tmp_path.iterdir()) == []


def test_locks_work_without_hard_links(tmp_path, monkeypatch):
    def no_link(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    target = tmp_path / "out.txt"
    with output_lock(target):
        assert json.loads(Path(f"{target}.lock").read_text())["pid"] == os.getpid()
    assert list(tmp_path.iterdir()) == []


def test_a_device_output_is_written_in_place_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    with atomic_path(fifo) as tmp:
        tmp.write_bytes(b"through the pipe")
    assert reader.communicate()[0] == b"through the pipe"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"] and Path(fifo).is_fifo()
    with text_output("/dev/null") as stream:
        stream.write("nothing")
    assert Path("/dev/null").is_char_device()


def test_atomic_folder_lands_whole_or_not_at_all(tmp_path):
    out = tmp_path / "site"
    with atomic_folder(out, False, lambda p: True, "site", "index.html") as staging:
        (staging / "index.html").write_text("one")
        assert not out.exists()
    assert (out / "index.html").read_text() == "one"
    with pytest.raises(RuntimeError), atomic_folder(out, True, lambda p: True, "site", "index.html") as staging:
        (staging / "index.html").write_text("two")
        raise RuntimeError("killed")
    assert (out / "index.html").read_text() == "one"
    with pytest.raises(VLToolsError, match="not empty"), atomic_folder(out, False, lambda p: True, "site", "x"):
        pass
    with pytest.raises(VLToolsError, match=r"only an earlier site \(index.html\)"):
        with atomic_folder(out, True, lambda p: False, "site", "index.html"):
            pass
    with atomic_folder(out, True, lambda p: True, "site", "index.html") as staging:
        (staging / "index.html").write_text("three")
    assert (out / "index.html").read_text() == "three"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_atomic_folder_refuses_a_symbolic_link_before_touching_anything(tmp_path):
    """Replacing a linked folder once renamed the link, then failed ("Cannot call rmtree on a symbolic link")
    and left `.OUT.old-PID` behind."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "index.html").write_text("earlier")
    (tmp_path / "site").symlink_to(real)
    for force in (True, False):
        with pytest.raises(VLToolsError, match=rf"site: is a symbolic link \(to {real}\); give the folder itself"):
            with atomic_folder(tmp_path / "site", force, lambda p: True, "site", "index.html"):
                pytest.fail("the block must not run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real", "site"]
    assert (tmp_path / "site").is_symlink() and (real / "index.html").read_text() == "earlier"


@pytest.fixture
def file_limit():
    """Set this process's file size limit (RLIMIT_FSIZE) for the test; put the old one back after."""
    import resource
    saved = resource.getrlimit(resource.RLIMIT_FSIZE)
    yield lambda size: resource.setrlimit(resource.RLIMIT_FSIZE, (size, saved[1]))
    resource.setrlimit(resource.RLIMIT_FSIZE, saved)


def test_check_room_refuses_a_write_over_the_file_size_limit_naming_the_file(tmp_path, file_limit):
    path = tmp_path / "out.bin"
    path.write_bytes(bytes(600))
    file_limit(1000)
    check_room(path, 400)
    with pytest.raises(OSError) as caught:
        check_room(path, 401)
    assert caught.value.errno == errno.EFBIG and caught.value.filename == str(path)
    assert "1001 bytes, over the limit of 1000" in caught.value.strerror


def test_check_room_refuses_more_than_the_disk_has_free(tmp_path):
    with pytest.raises(OSError) as caught:
        check_room(tmp_path / "out.bin", 1 << 62)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(tmp_path / "out.bin")


def test_deferred_writes_keep_the_first_error_and_read_back_what_was_not_written(tmp_path, file_limit):
    path = tmp_path / "out.bin"
    file_limit(1000)
    with DeferredWrites(path, truncate=True) as stream:
        assert stream.write(b"a" * 800) == 800
        assert stream.write(b"b" * 400) == 400    # 200 bytes fit, 200 do not: no exception
        assert stream.error is not None and stream.error.errno == errno.EFBIG
        assert stream.error.filename == str(path)
        stream.seek(700)
        assert stream.read(500) == b"a" * 100 + b"b" * 400
        stream.seek(0, os.SEEK_END)
        assert stream.tell() == 1200
        with pytest.raises(OSError) as caught:
            stream.check()
    assert caught.value.errno == errno.EFBIG
    assert path.read_bytes() == b"a" * 800 + b"b" * 200


def test_deferred_writes_without_error_write_the_file(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"0123456789")
    with DeferredWrites(path, truncate=False) as stream:
        stream.seek(4)
        stream.write(b"xy")
        stream.check()
    assert path.read_bytes() == b"0123xy6789"


class _Stop(BaseException):
    """What the test's SIGTERM handler raises (as the CLI's raises Terminated)."""


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_signals_held_acts_on_ctrl_c_and_sigterm_once_the_write_is_done(number):
    """A Ctrl-C in the middle of a part's write left datasets and ids of different lengths; the signal now waits."""
    def stop(*_):
        raise _Stop

    before = signal.signal(number, stop)
    steps = []
    try:
        with pytest.raises(_Stop), signals_held():
            steps.append("started")
            os.kill(os.getpid(), number)
            steps.append("finished")
        assert steps == ["started", "finished"] and signal.getsignal(number) is stop
    finally:
        signal.signal(number, before)
