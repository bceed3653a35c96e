"""What a file holds, told from its first bytes without parsing it: HDF5, a torch checkpoint, a NumPy array, JSON
text, ... So that a stage refuses a file of the wrong kind, or two inputs given in each other's places, at once
(before it loads torch or reads any data), and tells HDF5 on standard input from JSON lines.

No numpy, no h5py: the command line checks its inputs with these before a stage's library is imported.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from vltools.errors import VLToolsError, require_file
from vltools.io.shards import is_part_set, part_files

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# a line of Flickr8k/30k's captions.token: "1000268201_693b08cb0e.jpg#0\tA child in a pink dress ..."
FLICKR_LINE = re.compile(rb"[^\t\n#]+#\d+\t")
HEAD_BYTES = 64   # how much of a file `sniff` reads
# first bytes -> kind; a torch checkpoint is a zip archive (torch.save) or a pickle (the legacy format, the
# released SCAN / SGRAF .pth.tar files)
SIGNATURES = ((HDF5_SIGNATURE, "hdf5"), (b"PK\x03\x04", "checkpoint"), (b"PK\x05\x06", "checkpoint"),
              (b"\x80", "checkpoint"), (b"\x93NUMPY", "npy"), (b"\x1f\x8b", "gzip"), (b"\xff\xd8\xff", "image"),
              (b"\x89PNG", "image"))
# what a file found to be of each kind is, in messages
FOUND = {"hdf5": "HDF5", "checkpoint": "a torch checkpoint", "npy": "a NumPy .npy array", "json": "JSON text",
         "empty": "empty", "gzip": "gzip-compressed (decompress it first)", "image": "an image",
         "text": "plain text, not JSON", "binary": "binary data of an unknown kind", "folder": "a folder",
         "flickr": "a Flickr token file (IMAGE#N, a tab, a caption), which `vltools convert flickr` turns into "
                   "captions JSON lines",
         "records": "records (a list of dicts)", "document": "a dict",
         "features": "features (a dict of 'ids' and arrays)", "embeddings": "Embeddings"}
# data the Python API was given in memory (vltools.io.held.held's kinds) -> the kind of file it stands for
IN_MEMORY = {"records": "json", "document": "json", "features": "hdf5", "embeddings": "hdf5"}
# what an input takes -> the kinds found that it accepts, and how messages name it (an empty JSON lines file is
# left to its reader, which says what it expected)
TAKES = {"hdf5": ({"hdf5"}, "HDF5"), "checkpoint": ({"checkpoint"}, "a torch checkpoint"),
         "npy": ({"npy"}, "a NumPy .npy array"), "jsonl": ({"json", "empty"}, "JSON lines"),
         "json": ({"json"}, "JSON"), "lines": ({"text", "flickr", "json", "empty"}, "text, one item a line"),
         "folder": ({"folder"}, "a folder"), "image": ({"image"}, "a PNG or JPEG image"),
         "images": ({"folder", "image", "text", "json", "binary"},
                    "images (a folder, image files, a tar, a text list, an images JSONL or a Hugging Face "
                    "dataset)")}
LINE_KINDS = ("jsonl", "lines")   # what a stage reads a line at a time: from a pipe too, typed at a terminal too


def kind_of(head: bytes) -> str:
    """The kind (a key of FOUND) of data starting with `head`."""
    for signature, kind in SIGNATURES:
        if head.startswith(signature):
            return kind
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if not text:
        return "empty"
    if text[:1] in (b"{", b"["):
        return "json"
    if b"\x00" in head:
        return "binary"
    return "flickr" if FLICKR_LINE.match(text) else "text"


def same_file(path: str | os.PathLike) -> tuple[object, ...]:
    """What tells one state of regular file `path` from another (device, inode, size, modification time): a key
    under which what was learnt by opening it holds until it changes."""
    info = os.stat(path)
    return os.fspath(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


@functools.lru_cache(maxsize=256)
def _head_kind(key: tuple[object, ...]) -> str:
    with open(key[0], "rb") as stream:
        return kind_of(stream.read(HEAD_BYTES))


def sniff(path: str | os.PathLike, folder_ok: bool = False) -> str:
    """The kind of file `path` (a folder of parts, vltools.io.shards: its parts' kind; "folder" for another folder
    when `folder_ok`); anything else that is not a regular file (missing, a named pipe, a device) is the one-line
    error of `require_file`. A file is read once per process while it stays the same (the command line's check and
    the stage's reader ask the same question)."""
    if is_part_set(path):
        path = part_files(path)[0]
    elif folder_ok and Path(path).is_dir():
        return "folder"
    return _head_kind(same_file(require_file(path)))


def accepts(takes: tuple[str, ...], found: str) -> bool:
    """Whether an input that takes any of `takes` (keys of TAKES) accepts a file of kind `found`, or data in memory
    of kind `found` (IN_MEMORY), read as its file would be."""
    found = IN_MEMORY.get(found, found)
    return any(found in TAKES[kind][0] for kind in takes)


def described(takes: Sequence[str]) -> str:
    """What an input that takes `takes` (keys of TAKES) takes, in words: "HDF5", "JSON lines or HDF5", ..."""
    return " or ".join(TAKES[kind][1] for kind in takes)


@dataclass(frozen=True)
class Placed:
    """One input a stage or an API function was given: the file as given (`name`), how the caller names the input
    (`label`: FEATS.h5, --model, first, inputs[1]), what it takes (keys of TAKES) and what was found (FOUND)."""

    name: str
    label: str
    takes: tuple[str, ...]
    found: str

    def fits(self, other: Placed) -> bool:
        """Whether this file is of a kind that the input `other` takes."""
        return accepts(other.takes, self.found)


def refuse_swaps(given: Sequence[Placed]) -> None:
    """Refuse two inputs given in each other's places (each of a kind the other takes, a file or data in memory),
    naming both."""
    for wrong in given:
        if wrong.fits(wrong):
            continue
        for other in given:
            if other.label != wrong.label and wrong.fits(other) and other.fits(wrong):
                raise VLToolsError(f"{wrong.name} and {other.name} are in each other's places: {wrong.name} is "
                                   f"{FOUND[wrong.found]}, which {other.label} takes, and {other.name} is "
                                   f"{FOUND[other.found]}, which {wrong.label} takes; swap them")


def refuse_wrong_kinds(given: Sequence[Placed], hint: str) -> None:
    """Refuse the first input whose file is of a kind it does not take, in one line ending with `hint` (where to
    read what it takes); when another input takes that file and the first takes the other's, the two were given
    in each other's places: say so (`refuse_swaps`)."""
    refuse_swaps(given)
    for wrong in given:
        if not wrong.fits(wrong):
            raise VLToolsError(f"{wrong.name}: {wrong.label} must be {described(wrong.takes)}, but this is "
                               f"{FOUND[wrong.found]}; {hint}")


def peek(stream: BinaryIO | None, size: int = HEAD_BYTES) -> bytes:
    """Up to `size` first bytes of `stream`, left unread for its reader: a buffered pipe's or file's own `peek` (one
    read at most), else read and seek back; a missing stream (standard input closed) is empty."""
    if stream is None:
        return b""
    if hasattr(stream, "peek"):
        return stream.peek(size)[:size]
    start = stream.tell()
    head = stream.read(size)
    stream.seek(start)
    return head
