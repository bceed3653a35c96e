"""What a file holds, told from its first bytes: the kinds, the inputs that take them, and peeking at a stream."""

from __future__ import annotations

import io
import os

import h5py
import numpy as np
import pytest
import torch

from vltools.errors import VLToolsError
from vltools.io.kinds import Placed, accepts, kind_of, peek, refuse_wrong_kinds, sniff


def test_real_files_of_each_kind_are_told_apart(tmp_path):
    h5py.File(tmp_path / "a.h5", "w").close()
    torch.save({"w": torch.zeros(2)}, tmp_path / "a.pt")
    np.save(tmp_path / "a.npy", np.zeros(3))
    (tmp_path / "a.jsonl").write_text('\ufeff\n  {"image_id": "x"}\n', encoding="utf-8")
    (tmp_path / "a.json").write_text('[{"image_id": 1}]')
    (tmp_path / "empty.jsonl").write_text("\n \n")
    (tmp_path / "list.txt").write_text("images/a.jpg\n")
    found = {path.name: sniff(path) for path in sorted(tmp_path.iterdir())}
    assert found == {"a.h5": "hdf5", "a.pt": "checkpoint", "a.npy": "npy", "a.jsonl": "json", "a.json": "json",
                     "empty.jsonl": "empty", "list.txt": "text"}
    assert sniff(tmp_path, folder_ok=True) == "folder"
    with pytest.raises(VLToolsError, match="is a folder, not a file"):
        sniff(tmp_path)
    with pytest.raises(VLToolsError, match="absent.h5: no such file"):
        sniff(tmp_path / "absent.h5")


@pytest.mark.parametrize("head, kind", [
    (b"\x80\x02\x8a\x0al\xfc\x9cF", "checkpoint"),     # the legacy torch format: a pickle
    (b"\x1f\x8b\x08\x00", "gzip"), (b"\xff\xd8\xff\xe0", "image"), (b"\x89PNG\r\n", "image"),
    (b"ustar\x00\x00", "binary"), (b"", "empty"), (b"image_id\tcaption", "text"),
])
def test_first_bytes(head, kind):
    assert kind_of(head) == kind


def test_what_an_input_takes():
    assert accepts(("jsonl",), "json") and accepts(("jsonl",), "empty") and not accepts(("jsonl",), "hdf5")
    assert accepts(("jsonl", "hdf5"), "hdf5") and not accepts(("hdf5",), "json")
    assert not accepts(("json",), "empty") and accepts(("checkpoint",), "checkpoint")
    assert accepts(("images",), "folder") and accepts(("images",), "text") and not accepts(("images",), "checkpoint")


def test_peek_leaves_the_bytes_for_the_reader():
    seekable = io.BytesIO(b"\x89HDF\r\n\x1a\nrest")
    assert peek(seekable, 4) == b"\x89HDF" and seekable.read() == b"\x89HDF\r\n\x1a\nrest"
    read_end, write_end = os.pipe()
    os.write(write_end, b'{"image_id": "a"}\n')
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:          # a pipe cannot seek: its buffer keeps what was peeked
        assert peek(pipe, 1) == b"{"
        assert pipe.read() == b'{"image_id": "a"}\n'
    assert peek(None) == b""


def test_a_file_is_read_once_while_it_stays_the_same_and_again_once_it_changes(tmp_path, monkeypatch):
    """The command line's check and the stage's reader ask what a file is: one read answers both."""
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n')
    opened = []
    real = open

    def counted(file, *args, **kwargs):
        opened.append(os.fspath(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counted)
    assert sniff(path) == sniff(path) == "json" and opened.count(str(path)) == 1
    path.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(8))          # another size: another file
    assert sniff(path) == "hdf5" and opened.count(str(path)) == 2
    os.utime(path, ns=(0, 10**9))                             # the same size, another time: read again
    assert sniff(path) == "hdf5" and opened.count(str(path)) == 3


def test_a_flickr_token_file_is_told_apart_and_named_with_its_converter(tmp_path):
    """It was "plain text, not JSON", which did not point to vltools convert flickr."""
    tokens = tmp_path / "Flickr8k.token.txt"
    tokens.write_text("1000268201_693b08cb0e.jpg#0\tA child in a pink dress .\n")
    assert sniff(tokens) == "flickr" and accepts(("lines",), "flickr") and not accepts(("jsonl",), "flickr")
    with pytest.raises(VLToolsError, match=r"a Flickr token file \(IMAGE#N, a tab, a caption\), which `vltools "
                                           r"convert flickr` turns into captions JSON lines"):
        refuse_wrong_kinds([Placed(str(tokens), "CAPS.jsonl", ("jsonl",), sniff(tokens))], "see --help")
    assert kind_of(b"a.jpg is here\n") == "text"
