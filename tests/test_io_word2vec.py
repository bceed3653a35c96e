"""word2vec binary files: the words asked for, in file order, across read chunks; truncated and malformed files."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io import word2vec
from vltools.io.word2vec import read_word2vec_binary

WORDS = {"dog": (0.5, -1.0, 2.0), "cat": (1.5, 0.25, -3.0), "tree": (0.0, 7.0, 1.0), "café": (9.0, 9.0, 9.0)}


def write_binary(path, newlines: bool = True, header: bytes | None = None) -> bytes:
    """The C tool's layout written by hand: "N D", then word, space, D little-endian float32 (and a newline)."""
    data = header if header is not None else f"{len(WORDS)} 3\n".encode()
    for word, vector in WORDS.items():
        data += word.encode() + b" " + struct.pack("<3f", *vector) + (b"\n" if newlines else b"")
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("newlines", [True, False])
def test_reads_the_wanted_words_in_file_order(tmp_path, monkeypatch, newlines):
    monkeypatch.setattr(word2vec, "CHUNK_BYTES", 5)         # every record spans several reads
    write_binary(tmp_path / "v.bin", newlines)
    vectors = read_word2vec_binary(tmp_path / "v.bin", ["tree", "dog", "zebra"])
    assert vectors.words == ["dog", "tree"] and vectors.dim == 3 and vectors.vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors.vectors, [WORDS["dog"], WORDS["tree"]])
    assert read_word2vec_binary(tmp_path / "v.bin", ["café"]).words == ["café"]


def test_truncated_file_names_the_record(tmp_path):
    data = write_binary(tmp_path / "v.bin")
    end_of_tree = data.index(b"tree ") + len(b"tree ") + 12
    (tmp_path / "v.bin").write_bytes(data[:end_of_tree - 8])      # "tree" keeps 4 of its vector's 12 bytes
    with pytest.raises(VLToolsError) as error:
        read_word2vec_binary(tmp_path / "v.bin", ["dog"])
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'v.bin'}: record 3 of 4 (byte {data.index(b'tree')}, word 'tree')")
    assert "truncated" in message and "\n" not in message


@pytest.mark.parametrize("dim", [1, 2, 4, 5])
def test_a_header_that_lies_about_the_dimension_is_named(tmp_path, dim):
    """Vectors of 3 values under a header of `dim`: a smaller one found only the first word and the mixture was
    blamed ("1 distinct word vectors cannot fit 2 components"), a larger one called the file truncated."""
    write_binary(tmp_path / "v.bin", header=f"{len(WORDS)} {dim}\n".encode())
    with pytest.raises(VLToolsError) as error:
        read_word2vec_binary(tmp_path / "v.bin", ["dog", "cat"])
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'v.bin'}: record 2 of 4 (byte ")
    assert message.endswith(f"is not a word (empty, or holding a line break or tab); the header's dimension {dim} "
                            "is not its vectors' (each record is a word, a space and D float32), or the file is "
                            "corrupt") and "\n" not in message


def test_a_file_ending_inside_a_record_may_be_a_header_that_overstates_it(tmp_path):
    write_binary(tmp_path / "v.bin", newlines=False, header=f"{len(WORDS)} 4\n".encode())
    with pytest.raises(VLToolsError, match="truncated \\(download it again\\), or its header '4 4' is not what it "
                                           "holds$"):
        read_word2vec_binary(tmp_path / "v.bin", ["dog"])


def test_header_that_is_not_word_count_and_dimensions(tmp_path):
    write_binary(tmp_path / "v.bin", header=b"dog 0.5 1.0\n")
    with pytest.raises(VLToolsError, match=r"v\.bin: line 1: header .* is not 'N D'"):
        read_word2vec_binary(tmp_path / "v.bin", ["dog"])


def test_text_file_without_spaces_is_refused(tmp_path):
    (tmp_path / "v.bin").write_bytes(b"2 3\n" + b"x" * 5000)
    with pytest.raises(VLToolsError, match="record 1 of 2 .*no space within"):
        read_word2vec_binary(tmp_path / "v.bin", ["dog"])


def test_missing_file(tmp_path):
    with pytest.raises(VLToolsError, match="no such file"):
        read_word2vec_binary(tmp_path / "absent.bin", ["dog"])
