import logging
import os

import h5py
import numpy as np
import pytest

from vltools.cli import main
from vltools.errors import VLToolsError
from vltools.io.embeddings import open_embeddings, write_embeddings
from vltools.io.hdf5 import (
    decode_strings,
    file_kind,
    hdf5_kind,
    is_hdf5,
    open_h5,
    read,
    read_strings,
    verify,
    write_arrays,
)
from vltools.io.held import FeaturesInMemory
from vltools.io.index import read_index, write_index
from vltools.io.sims import read_sims, write_sims


def test_write_arrays_records_kind_provenance_and_strings(tmp_path):
    path = tmp_path / "e.h5"
    write_arrays(path, "embeddings", {"ids": ["é1", "b"], "emb": np.eye(2, dtype=np.float32)}, {"model": "vse"})
    with open_h5(path, "embeddings") as handle:
        assert file_kind(handle) == "embeddings"
        assert decode_strings(handle["ids"][:]) == ["é1", "b"]
        np.testing.assert_array_equal(handle["emb"][:], np.eye(2))
        assert handle.attrs["model"] == "vse"
        assert "command" in handle.attrs


def test_truncated_file_is_reported(tmp_path):
    path = tmp_path / "e.h5"
    write_arrays(path, "embeddings", {"ids": ["a"], "emb": np.zeros((1, 4))})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(VLToolsError, match="truncated"):
        open_h5(path)


def test_plain_hdf5_without_format_is_not_a_vltools_file(tmp_path):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as handle:
        handle["x"] = np.zeros(3)
    with pytest.raises(VLToolsError, match="not a vltools file"):
        open_h5(path, "sims")
    with pytest.raises(VLToolsError, match="no such file"):
        open_h5(tmp_path / "absent.h5")


def test_is_hdf5_tells_hdf5_from_text(tmp_path):
    write_arrays(tmp_path / "e.h5", "embeddings", {"ids": ["a"], "emb": np.zeros((1, 2))})
    (tmp_path / "r.jsonl").write_text('{"query": "a"}\n')
    assert is_hdf5(tmp_path / "e.h5") and not is_hdf5(tmp_path / "r.jsonl") and not is_hdf5("-")
    with pytest.raises(VLToolsError, match="no such file"):
        is_hdf5(tmp_path / "absent.h5")


def test_is_hdf5_refuses_a_named_pipe_by_name_instead_of_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.h5")
    with pytest.raises(VLToolsError, match=r"pipe.h5: is a named pipe, not a file; give a regular file$"):
        is_hdf5(tmp_path / "pipe.h5")
    with pytest.raises(VLToolsError, match=r"pipe.h5: is a named pipe, not a file"):
        open_h5(tmp_path / "pipe.h5")


def flip(path, target, position) -> None:
    """Write `path` with the byte at `position` inverted to `target`."""
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    target.write_bytes(bytes(data))


def header_address(path, name: str) -> int:
    """Where the object header of dataset `name` starts (its first byte is the header's version number)."""
    with h5py.File(path, "r") as handle:
        return h5py.h5o.get_info(handle[name].id).addr


def test_a_flipped_object_header_of_any_dataset_is_one_line_naming_the_file(tmp_path):
    """Checksums catch flipped data, not flipped metadata: h5py raised a KeyError ('bad object header version
    number') from deep in whichever stage looked the dataset up."""
    path = tmp_path / "sims.h5"
    write_sims(path, np.arange(6, dtype=np.float32).reshape(2, 3), ["a", "b"], ["c0", "c1", "c2"], ["a", "b", "b"])
    for name in ("sims", "image_ids", "caption_ids", "caption_image_ids"):
        bad = tmp_path / f"bad-{name}.h5"
        flip(path, bad, header_address(path, name))
        with pytest.raises(VLToolsError) as error:
            read_sims(bad)
        assert str(error.value) == (f"{bad}: /{name} is damaged (checksum mismatch or unreadable HDF5 structure: "
                                    "Unable to synchronously open object (bad object header version number)); "
                                    "rerun the stage that wrote it, or restore the file from a copy")


def test_unreadable_data_on_every_read_path_names_the_file_and_dataset(tmp_path):
    """"Can't synchronously read data" once named no file (feature maps, proxy files)."""
    path = tmp_path / "e.h5"
    write_arrays(path, "embeddings", {"ids": ["a", "b"], "emb": np.ones((2, 64), dtype=np.float32)})
    with h5py.File(path, "r") as handle:
        offset = handle["emb"].id.get_chunk_info(0).byte_offset
    flip(path, tmp_path / "flipped.h5", offset + 8)
    with open_h5(tmp_path / "flipped.h5", "embeddings") as handle:
        assert decode_strings(handle["ids"][()]) == ["a", "b"]
        for read in (lambda: handle["emb"][()], lambda: handle["emb"][0:1], lambda: verify(handle)):
            with pytest.raises(VLToolsError, match=r"flipped.h5: /emb is damaged \(checksum mismatch .*filter "
                                                   r"returned failure during read\)\); rerun the stage"):
                read()


def test_an_h5py_error_anywhere_in_a_with_block_is_one_line_and_other_errors_pass(tmp_path):
    path = tmp_path / "e.h5"
    write_arrays(path, "embeddings", {"ids": ["a"], "emb": np.zeros((1, 2))})
    with pytest.raises(VLToolsError, match=r"e.h5: the HDF5 file is damaged \(.*\); rerun the stage"), \
            open_h5(path) as handle:
        handle["emb"].id.set_extent((3, 2))    # a low-level call outside the checked objects
    with pytest.raises(KeyError, match="'absent'"), open_h5(path) as handle:
        {}["absent"]
    with open_h5(path) as handle:
        assert "absent" not in handle and handle.get("absent") is None and handle.attrs.get("absent") is None
        assert isinstance(handle["emb"], h5py.Dataset) and handle["emb"].shape == (1, 2)


def test_match_over_a_sims_file_with_a_flipped_header_exits_1_in_one_line(tmp_path, capsys):
    first, second = tmp_path / "A_sims.h5", tmp_path / "B_sims.h5"
    write_sims(first, np.eye(2, 3), ["a", "b"], ["c0", "c1", "c2"], ["a", "b", "b"])
    flip(first, second, header_address(first, "sims"))
    out = tmp_path / "ranks.jsonl"
    with pytest.raises(SystemExit) as exit_info:
        main(["match", str(first), str(second), "-o", str(out)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{second}: /sims is damaged" in err and not out.exists()


GUARDED_WRITE = """
import errno, resource, sys
import numpy as np
from vltools.io.hdf5 import OutputFile, create_dataset
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
handle = OutputFile(sys.argv[1])
dataset = create_dataset(handle, "x", shape=(0, 36, 512), maxshape=(None, 36, 512), dtype="f2", chunks=(1, 36, 512))
for row in range(10):
    dataset.resize(row + 1, axis=0)
    dataset[row] = np.ones((36, 512), "f2")
handle.close()
try:
    handle.check()
except OSError as exc:
    print(errno.errorcode[exc.errno], exc.filename)
"""


def test_a_write_past_the_file_size_limit_is_an_error_after_close_not_a_crash(tmp_path):
    """HDF5 buffers writes, so the failure comes while the file closes: HDF5 must not see it (it crashes)."""
    import subprocess
    import sys
    path = tmp_path / "big.h5"
    result = subprocess.run([sys.executable, "-c", GUARDED_WRITE, str(path)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["EFBIG", str(path)]
    assert result.stderr == ""


def test_hdf5_kind_names_the_declared_kind_plain_hdf5_or_not_hdf5(tmp_path):
    write_arrays(tmp_path / "p.h5", "proxy", {"ids": ["a"]}, {})
    with h5py.File(tmp_path / "plain.h5", "w") as handle:
        handle["x"] = [1]
    (tmp_path / "caps.jsonl").write_text('{"image_id": "a", "caption": "a dog"}\n')
    assert [hdf5_kind(tmp_path / name) for name in ("p.h5", "plain.h5", "caps.jsonl")] == ["proxy", "hdf5", None]
    assert hdf5_kind("-") is None


def test_features_in_memory_are_of_the_features_kind_and_their_arrays_are_read_as_they_are():
    regions = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    features = FeaturesInMemory("first (in memory)", {"ids": np.array(list("abcd"), dtype=object), "regions": regions},
                                {})
    assert hdf5_kind(features) == "features"
    np.testing.assert_array_equal(read(features["regions"], np.array([3, 0])), regions[[3, 0]])
    assert np.shares_memory(read(features["regions"], slice(1, 3)), regions)       # a view, not a copy
    assert read(features["regions"], 2).shape == (2, 3)
    assert read_strings(features, "ids") == ["a", "b", "c", "d"]


def swap_first_two(path, name):
    with h5py.File(path, "a") as handle:
        values = handle[name][()]
        values[[0, 1]] = values[[1, 0]]
        handle[name][...] = values


def write_and_open_embeddings(path):
    write_embeddings(path, ["a", "b", "c"], [np.eye(3, dtype=np.float32)], {"side": "captions"},
                     caption_image_ids=["i", "j", "k"])
    return lambda: open_embeddings(path).close()


def write_and_read_index(path):
    write_index(path, ["a", "b", "c"], np.zeros(8, np.uint8), {"metric": "ip", "factory": "Flat", "dims": 3})
    return lambda: read_index(path)


def write_and_read_sims(path):
    write_sims(path, np.eye(3, dtype=np.float32), ["a", "b", "c"], ["x", "y", "z"])
    return lambda: read_sims(path)


@pytest.mark.parametrize(("writer", "name"), [(write_and_open_embeddings, "ids"),
                                              (write_and_open_embeddings, "caption_image_ids"),
                                              (write_and_read_index, "ids"), (write_and_read_sims, "image_ids"),
                                              (write_and_read_sims, "caption_ids")])
def test_an_id_list_edited_after_writing_fails_its_digest_in_one_line(tmp_path, caplog, writer, name):
    """Two ids swapped with h5py name the wrong rows silently unless the digest each writer records is checked."""
    path = tmp_path / "f.h5"
    reader = writer(path)
    reader()
    swap_first_two(path, name)
    with pytest.raises(VLToolsError) as caught:
        reader()
    assert str(caught.value) == (f"{path}: /{name} does not match its checksum (attribute '{name}_digest'); the file "
                                 "was edited or is corrupt, rerun the stage that wrote it, or restore the file from a "
                                 "copy")
    with h5py.File(path, "a") as handle:       # a file written before digests were recorded is read unchecked
        del handle.attrs[f"{name}_digest"]
    with caplog.at_level(logging.WARNING, logger="vltools"):
        reader()
        reader()
    # it was read without a word (the digest deleted by hand is how a hostile edit hides)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: /{name} has no checksum (attribute '{name}_digest': the file was edited, or written before vltools "
        "recorded one), so its ids are read unchecked; rerun the stage that wrote it"]
