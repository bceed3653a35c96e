"""vltools.io.write_errors: room checks and writes that never fail."""

import errno
import os

import pytest

from vltools.io.write_errors import DeferredWrites, check_room


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
