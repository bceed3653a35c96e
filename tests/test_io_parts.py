"""Resumable parts and the streaming merge: order, compatibility checks, duplicates, stale parts, when parts are
committed, and how many files a merge holds open."""

from __future__ import annotations

import os
import shutil
import signal

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io import parts as parts_module
from vltools.io.features import FeaturesReader, FeaturesWriter
from vltools.io.parts import PartsWriter, merge_features, signals_held

ATTRS = {"backbone": "resnet18", "weights": "none", "regions": "grid", "image_size": 64}


def _rows(ids, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    return {"regions": rng.standard_normal((len(ids), 2, dim)).astype(np.float32),
            "image_size": rng.integers(1, 100, (len(ids), 2)).astype(np.int32)}


def _write(path, ids, attrs=ATTRS, dim=3, seed=0, failed=()):
    rows = _rows(ids, dim, seed)
    with FeaturesWriter(path, attrs, dtype="float32") as writer:
        writer.add(ids, **rows)
        writer.set_failed(list(failed))
    return rows


def test_merge_concatenates_in_given_order_and_keeps_failed(tmp_path):
    a = _write(tmp_path / "a.h5", ["x", "y"], seed=1, failed=["bad\tempty file"])
    b = _write(tmp_path / "b.h5", ["z"], seed=2)
    count = merge_features([tmp_path / "a.h5", tmp_path / "b.h5"], tmp_path / "m.h5", ATTRS,
                           failed=["bad\tempty file"])
    with FeaturesReader(tmp_path / "m.h5") as merged:
        assert count == 3 and merged.ids == ["x", "y", "z"]
        data = merged.read(["x", "y", "z"])
    assert np.array_equal(data["regions"], np.concatenate([a["regions"], b["regions"]]))
    assert FeaturesReader(tmp_path / "m.h5").failed == ["bad\tempty file"]


def test_merge_follows_an_explicit_order_across_sources(tmp_path):
    a = _write(tmp_path / "a.h5", ["x", "z"], seed=1)
    b = _write(tmp_path / "b.h5", ["y"], seed=2)
    merge_features([tmp_path / "a.h5", tmp_path / "b.h5"], tmp_path / "m.h5", ATTRS, order=["z", "y", "x"])
    with FeaturesReader(tmp_path / "m.h5") as merged:
        assert merged.ids == ["z", "y", "x"]
        regions = merged.read(["z", "y", "x"])["regions"]
    assert np.array_equal(regions, np.stack([a["regions"][1], b["regions"][0], a["regions"][0]]))


def test_merge_refuses_different_options_shapes_and_duplicate_ids(tmp_path):
    _write(tmp_path / "a.h5", ["x"])
    _write(tmp_path / "other_backbone.h5", ["y"], attrs={**ATTRS, "backbone": "resnet50"})
    _write(tmp_path / "other_dim.h5", ["y"], dim=4)
    _write(tmp_path / "dup.h5", ["x"])
    cases = [("other_backbone.h5", "backbone"), ("other_dim.h5", "/regions"), ("dup.h5", "'x' is also in")]
    for name, what in cases:
        with pytest.raises(VLToolsError, match=what) as info:
            merge_features([tmp_path / "a.h5", tmp_path / name], tmp_path / "m.h5", ATTRS)
        assert str(info.value).startswith(str(tmp_path / name))


def test_parts_commit_resume_and_merge(tmp_path):
    folder = tmp_path / "out.h5.partial"
    parts = PartsWriter(folder, ATTRS, "float32", commit_seconds=0, resume=False)
    rows = _rows(["a", "b", "c"])
    parts.add(["a", "b"], regions=rows["regions"][:2], image_size=rows["image_size"][:2])
    assert sorted(p.name for p in folder.iterdir()) == ["part-000000.h5"]
    (folder / "part-000001.h5.tmp").write_bytes(b"half-written by a killed run")
    resumed = PartsWriter(folder, ATTRS, "float32", commit_seconds=0, resume=True)
    assert resumed.done == {"a", "b"} and not (folder / "part-000001.h5.tmp").exists()
    resumed.add(["c"], regions=rows["regions"][2:], image_size=rows["image_size"][2:])
    assert resumed.merge_into(tmp_path / "out.h5", ATTRS, ["c", "b", "a", "never-done"], []) == 3
    resumed.remove()
    assert not folder.exists()
    with FeaturesReader(tmp_path / "out.h5") as merged:
        assert merged.ids == ["c", "b", "a"]
        assert np.array_equal(merged.read(["a", "b", "c"])["regions"], rows["regions"])


def test_resume_with_different_options_is_refused(tmp_path):
    folder = tmp_path / "out.h5.partial"
    parts = PartsWriter(folder, ATTRS, "float32", commit_seconds=0, resume=False)
    parts.add(["a"], **_rows(["a"]))
    with pytest.raises(VLToolsError, match="backbone"):
        PartsWriter(folder, {**ATTRS, "backbone": "vgg19"}, "float32", commit_seconds=0, resume=True)
    shutil.rmtree(folder)
    fresh = PartsWriter(folder, ATTRS, "float32", commit_seconds=0, resume=False)
    assert fresh.done == set() and not list(folder.iterdir())


def test_a_run_without_resume_refuses_finished_parts_instead_of_deleting_them(tmp_path):
    """A plain rerun of a killed extract-regions deleted its finished parts without a word."""
    folder = tmp_path / "out.h5.partial"
    PartsWriter(folder, ATTRS, "float32", commit_seconds=0, resume=False).add(["a"], **_rows(["a"]))
    with pytest.raises(VLToolsError) as caught:
        PartsWriter(folder, ATTRS, "float32", commit_seconds=0, resume=False)
    assert str(caught.value) == f"{folder}: left by an interrupted run; continue it with --resume, or delete it"
    assert [p.name for p in folder.iterdir()] == ["part-000000.h5"]


class _Clock:
    """time.monotonic as the test sets it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_parts_are_committed_once_commit_seconds_passed_since_the_last_commit_or_the_start(tmp_path, monkeypatch):
    """A batch slower than the interval is committed on its own (a part used to wait for a second batch, its clock
    starting at the first), and later ones once the interval has passed again."""
    clock = _Clock()
    monkeypatch.setattr(parts_module.time, "monotonic", clock)
    folder = tmp_path / "out.h5.partial"
    parts = PartsWriter(folder, ATTRS, "float32", commit_seconds=10, resume=False)
    rows = _rows(list("abcd"))

    def add(n):
        parts.add([list("abcd")[n]], **{k: v[n:n + 1] for k, v in rows.items()})

    clock.now += 10
    add(0)
    assert sorted(p.name for p in folder.iterdir()) == ["part-000000.h5"]
    clock.now += 4
    add(1)
    clock.now += 5
    add(2)
    assert sorted(p.name for p in folder.iterdir()) == ["part-000000.h5", "part-000001.h5.tmp"]
    clock.now += 1
    add(3)
    assert sorted(p.name for p in folder.iterdir()) == ["part-000000.h5", "part-000001.h5"]
    with FeaturesReader(folder / "part-000001.h5") as reader:
        assert reader.ids == ["b", "c", "d"]


def test_discard_commits_a_whole_open_part_and_drops_one_a_failed_write_cut(tmp_path):
    """After an interruption (Ctrl-C, SIGTERM, an error in the model step) the finished rows of the open part are
    kept for --resume; after a failed write they are dropped, and no longer counted as done."""
    folder = tmp_path / "out.h5.partial"
    parts = PartsWriter(folder, ATTRS, "float32", commit_seconds=3600, resume=False)
    rows = _rows(["a", "b", "c"])
    parts.add(["a", "b"], regions=rows["regions"][:2], image_size=rows["image_size"][:2])
    assert [p.name for p in folder.iterdir()] == ["part-000000.h5.tmp"]
    parts.discard()
    assert [p.name for p in folder.iterdir()] == ["part-000000.h5"]
    resumed = PartsWriter(folder, ATTRS, "float32", commit_seconds=3600, resume=True)
    assert resumed.done == {"a", "b"}
    resumed.add(["c"], regions=rows["regions"][2:], image_size=rows["image_size"][2:])
    with pytest.raises(ValueError, match="rows"):
        resumed.add(["d"], regions=rows["regions"], image_size=rows["image_size"][:1])
    resumed.discard()
    assert resumed.done == {"a", "b"} and sorted(p.name for p in folder.iterdir()) == ["part-000000.h5"]


def test_a_merge_of_many_parts_holds_few_files_open(tmp_path, monkeypatch):
    """A merge opened every part at once: past the open-files limit (1024 on many systems: 17 hours of 60-second
    parts) it failed, calling a part 'not a readable HDF5 file', and so did every --resume after it."""
    monkeypatch.setattr(parts_module, "OPEN_READERS", 2)
    monkeypatch.setattr(parts_module, "MERGE_BLOCK", 3)
    opened, open_now, most = [], set(), [0]

    class Counted(FeaturesReader):
        def __init__(self, path):
            super().__init__(path)
            opened.append(path.name)
            open_now.add(id(self))
            most[0] = max(most[0], len(open_now))

        def close(self):
            open_now.discard(id(self))
            super().close()

    monkeypatch.setattr(parts_module, "FeaturesReader", Counted)
    sources, want = [], {}
    for number in range(5):
        ids = [f"p{number}r{row}" for row in range(2)]
        sources.append(tmp_path / f"part-{number:06d}.h5")
        want.update(zip(ids, _write(sources[-1], ids, seed=number)["regions"], strict=True))
    order = sorted(want, key=lambda i: (i[-1], i))      # rows of every part in each block of 3
    assert merge_features(sources, tmp_path / "m.h5", ATTRS, order) == 10
    assert most[0] <= 1 + 2 and not open_now       # the reference file and two parts
    with FeaturesReader(tmp_path / "m.h5") as merged:
        assert merged.ids == order
        assert np.array_equal(merged.read(order)["regions"], np.stack([want[i] for i in order]))


@pytest.mark.parametrize("output", ["feats.h5", "standard output"])
def test_a_row_float16_cannot_hold_names_the_users_output_and_the_option_not_a_part(tmp_path, output):
    """The tester's extract-regions to standard output failed naming .../parts/part-000000.h5.tmp in the temporary
    folder; the error names the output they gave and --dtype float32."""
    folder = tmp_path / "spool" / "parts"
    folder.parent.mkdir()
    parts = PartsWriter(folder, ATTRS, "float16", commit_seconds=3600, resume=False, output=output)
    rows = _rows(["a", "b"])
    parts.add(["a"], regions=rows["regions"][:1], image_size=rows["image_size"][:1])
    large = rows["regions"][1:] + 1e5       # finite, beyond float16's largest value (65504)
    with pytest.raises(VLToolsError) as error:
        parts.add(["b"], regions=large, image_size=rows["image_size"][1:])
    message = str(error.value)
    assert message == f"{output}: image id 'b': /regions values exceed float16's range (largest 65504); rerun " \
                      "with --dtype float32"
    assert ".tmp" not in message and "parts" not in message and str(tmp_path) not in message


@pytest.mark.parametrize("resume", [True, False])
def test_a_parts_folder_holding_anything_but_parts_is_refused_and_left_as_it_is(tmp_path, resume):
    """OUT.partial/ holding the user's own files was removed with them when the run ended (--resume) or began."""
    folder = tmp_path / "out.h5.partial"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    (folder / "part-000000.h5.tmp").write_bytes(b"half-written")
    with pytest.raises(VLToolsError) as caught:
        PartsWriter(folder, ATTRS, "float32", commit_seconds=0, resume=resume)
    assert str(caught.value) == (f"{folder}: holds notes.txt, which no vltools run wrote there (it holds only "
                                 "part-NNNNNN.h5 files), and the run would remove it with the folder; move it away")
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt", "part-000000.h5.tmp"]
    folder.rename(tmp_path / "kept")
    folder.write_text("a file of the same name")
    with pytest.raises(VLToolsError, match=r"out.h5.partial: is a file, not the folder of parts an interrupted "):
        PartsWriter(folder, ATTRS, "float32", commit_seconds=0, resume=resume)
    assert folder.read_text() == "a file of the same name"


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
