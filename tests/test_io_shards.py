"""Sets of parts: which inputs each process takes, where it writes them, and the folder read back as one set."""

from __future__ import annotations

import pytest

from vltools.errors import VLToolsError
from vltools.io.shards import is_part_set, names_folder, part_files, part_path, this_part


def spans(parts, total, batch):
    return [part.span(total, batch) for part in parts]


@pytest.mark.parametrize(("total", "batch", "count"), [(10, 2, 2), (10, 3, 4), (7, 8, 3), (0, 4, 2), (100, 1, 8)])
def test_the_parts_are_runs_of_whole_batches_that_cover_every_input_once_in_order(total, batch, count):
    parts = [this_part((index, count), 0, 1, folder=True) for index in range(count)]
    found = spans(parts, total, batch)
    assert found[0][0] == 0 and found[-1][1] == total
    assert all(found[k][1] == found[k + 1][0] for k in range(count - 1))
    assert all(start % batch == 0 or start == total for start, _ in found)   # every batch is one process's batch


def test_under_torchrun_each_process_writes_its_part_of_its_shard():
    """Shard 1 of 2 (images 6..11 of 12 in batches of 2), cut again among 3 processes: two images each."""
    parts = [this_part((1, 2), rank, 3, folder=False) for rank in range(3)]
    assert [(part.index, part.count, part.in_folder, part.whole) for part in parts] == \
        [(0, 3, True, "1/2"), (1, 3, True, "1/2"), (2, 3, True, "1/2")]
    assert spans(parts, 12, 2) == [(6, 8), (8, 10), (10, 12)]
    assert parts[1].attrs(12, 2) == {"part": "1/3", "span": "8:10/12"}


def test_without_torchrun_a_shard_writes_its_own_file_or_a_part_of_a_folder():
    assert this_part(None, 0, 1, folder=True) is None
    alone = this_part((2, 4), 0, 1, folder=False)
    assert not alone.in_folder and alone.attrs(8) == {} and alone.span(8) == (4, 6)
    assert this_part((2, 4), 0, 1, folder=True).in_folder


def test_an_output_names_a_folder_when_it_is_one_or_ends_in_a_slash(tmp_path):
    assert names_folder(tmp_path) and names_folder(f"{tmp_path}/new/") and not names_folder(tmp_path / "f.h5")


def test_a_part_goes_in_its_folder_which_is_made_once_its_parent_exists(tmp_path):
    part = this_part(None, 1, 2, folder=False)
    assert part_path(tmp_path / "feats", part, "h5") == str(tmp_path / "feats" / "part-00001-of-00002.h5")
    assert (tmp_path / "feats").is_dir()
    with pytest.raises(VLToolsError, match="the folder .*absent does not exist; create it first"):
        part_path(tmp_path / "absent" / "feats", part, "h5")
    (tmp_path / "file").write_text("x")
    with pytest.raises(VLToolsError, match="is a file, and the parts of this run go in a folder of that name"):
        part_path(tmp_path / "file", part, "h5")


def test_a_set_is_read_once_every_part_is_there(tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    assert not is_part_set(folder)
    with pytest.raises(VLToolsError, match="holds no parts"):
        part_files(folder)
    (folder / "part-00001-of-00003.h5").write_bytes(b"")
    assert is_part_set(folder)
    with pytest.raises(VLToolsError, match=r"part-00000-of-00003 is missing \(1 of 3 parts are there\); run it"):
        part_files(folder)
    (folder / "part-00000-of-00003.h5").write_bytes(b"")
    (folder / "part-00002-of-00003.h5.partial").mkdir()
    with pytest.raises(VLToolsError, match="part part-00002-of-00003.h5 was interrupted or is still being written"):
        part_files(folder)
    (folder / "part-00002-of-00003.h5.partial").rmdir()
    (folder / "part-00002-of-00003.h5").write_bytes(b"")
    (folder / "part-00002-of-00003.h5.lock").write_text("")      # a part being written again: its lock is no part
    assert [path.name for path in part_files(folder)] == [f"part-0000{k}-of-00003.h5" for k in range(3)]


def test_anything_else_in_the_folder_or_two_sets_are_refused(tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "part-00000-of-00001.h5").write_bytes(b"")
    (folder / "notes.txt").write_text("x")
    with pytest.raises(VLToolsError, match="holds notes.txt, which is not a part"):
        part_files(folder)
    (folder / "notes.txt").unlink()
    (folder / "part-00000-of-00002.h5").write_bytes(b"")
    with pytest.raises(VLToolsError, match="holds parts of different sets"):
        part_files(folder)


def test_a_folder_that_cannot_be_made_is_one_line_naming_it(tmp_path, monkeypatch):
    def refused(self, *args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr("pathlib.Path.mkdir", refused)
    with pytest.raises(VLToolsError, match=r"feats: cannot write \(Read-only file system\)"):
        part_path(tmp_path / "feats", this_part(None, 0, 2, folder=False), "h5")
