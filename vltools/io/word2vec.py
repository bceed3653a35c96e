"""word2vec's binary vector files (the C tool's `-binary 1` output, e.g. GoogleNews-vectors-negative300.bin).

Layout: an ASCII header line "N D", then N records, each the word's bytes, one space and D little-endian float32;
files the C tool wrote end each record with a newline, which this reader skips as the start of the next word. The
published GoogleNews file is 3.6 GB (3 million words), so the reader streams it in chunks and keeps only the words
it is asked for, compared as bytes (no decoding of the other 3 million).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from vltools.errors import VLToolsError, input_error, require_file

CHUNK_BYTES = 1 << 24
MAX_WORD_BYTES = 1000        # longer than any real word: the file is not word2vec's binary format
GIVE = "give word2vec's binary format (e.g. GoogleNews-vectors-negative300.bin)"
# bytes no word holds (the C tool splits its text on them): one in a word read means the records were misread, as
# a header with the wrong dimension makes them (found within a few records where each ends with a newline)
NOT_IN_WORDS = re.compile(rb"[\t\n\r]")


@dataclass
class WordVectors:
    """Words and their vectors (row i is words[i]'s, float32)."""

    words: list[str]
    vectors: np.ndarray

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]


def read_header(path: str | os.PathLike, line: bytes) -> tuple[int, int]:
    """(N words, D dimensions) of a header line, or the error naming the file."""
    fields = line.split()
    if len(fields) != 2 or not all(field.isdigit() for field in fields) or int(fields[1]) == 0:
        raise input_error(path, "line 1", f"header {line[:80]!r} is not 'N D' (word count, dimensions)", GIVE)
    return int(fields[0]), int(fields[1])


def truncated(path: str | os.PathLike, number: int, n_words: int, offset: int, rest: bytes,
              record: int) -> VLToolsError:
    """The error for a file that ends inside record `number` (`rest`: its bytes, from `offset` in the file)."""
    start = len(rest) - len(rest.lstrip(b"\n"))               # the previous record's newline
    word, space, vector = rest[start:].partition(b" ")
    shown = word[:80].decode("utf-8", "replace")
    present = f"{len(vector)} of the vector's {record} bytes" if space else "no space after the word"
    return input_error(path, f"record {number} of {n_words} (byte {offset + start}, word {shown!r})",
                       f"the file ends inside the record ({present})",
                       f"the file is truncated (download it again), or its header '{n_words} {record // 4}' is not "
                       "what it holds")


def read_word2vec_binary(path: str | os.PathLike, wanted: Iterable[str]) -> WordVectors:
    """The vectors of the `wanted` words found in a word2vec binary file, in file order; a truncated or malformed
    file is an error naming it and the record (number, word and byte offset) where it breaks, and so is a header
    whose dimension is not the vectors', once the misread records show it: a word read holding a line break (soon,
    where each record ends with a newline, as the C tool and gensim write them) or the file ending inside a record."""
    keys = {word.encode("utf-8") for word in wanted}
    found: dict[bytes, np.ndarray] = {}
    try:
        with open(require_file(path), "rb") as stream:
            header = stream.readline(200)
            n_words, dim = read_header(path, header)
            record = 4 * dim
            buffer, pos, offset = b"", 0, len(header)     # offset: the file position of buffer[0]
            for number in range(1, n_words + 1):
                while True:
                    space = buffer.find(b" ", pos, pos + MAX_WORD_BYTES + 2)
                    if space >= 0 and space + 1 + record <= len(buffer):
                        break
                    if space < 0 and len(buffer) - pos > MAX_WORD_BYTES + 1:
                        raise input_error(path, f"record {number} of {n_words} (byte {offset + pos})",
                                          f"no space within {MAX_WORD_BYTES} bytes: not a word", GIVE)
                    more = stream.read(CHUNK_BYTES)
                    if not more:
                        raise truncated(path, number, n_words, offset + pos, buffer[pos:], record)
                    buffer, offset, pos = buffer[pos:] + more, offset + pos, 0
                word = buffer[pos:space].lstrip(b"\n")
                if not word or NOT_IN_WORDS.search(word):
                    raise input_error(path, f"record {number} of {n_words} (byte {offset + pos})",
                                      f"{word[:40]!r} is not a word (empty, or holding a line break or tab)",
                                      f"the header's dimension {dim} is not its vectors' (each record is a word, a "
                                      "space and D float32), or the file is corrupt")
                if word in keys:
                    vector = np.frombuffer(buffer, dtype="<f4", count=dim, offset=space + 1).copy()
                    if not np.isfinite(vector).all():
                        raise input_error(path, f"record {number} (byte {offset + pos}, word {word.decode()!r})",
                                          "the vector holds NaN or infinity", GIVE)
                    found[word] = vector
                pos = space + 1 + record
    except OSError as exc:
        raise input_error(path, None, f"cannot be read ({exc.strerror or exc})", GIVE) from None
    words = list(found)
    vectors = np.stack([found[w] for w in words]) if words else np.zeros((0, dim), dtype=np.float32)
    return WordVectors([w.decode("utf-8") for w in words], vectors.astype(np.float32))
