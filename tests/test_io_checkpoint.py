"""The one resumable checkpoint: its folder, state and chunks, the resume rule, commits, and reading back in order."""

from __future__ import annotations

import json
import logging
import os
import signal

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io import checkpoint as checkpoint_module
from vltools.io.checkpoint import STATE, Checkpoint, Records, Rows, signals_held


def _rows(ids, seed=0):
    rng = np.random.default_rng(seed)
    return {"rows": rng.standard_normal((len(ids), 3)).astype(np.float32)}


def _open(folder, resume=False, options=None, digests="d", commit_seconds=0.0, codec=None):
    return Checkpoint(folder, "out.h5", codec or Rows(), options or {"model": "m"}, digests, resume, commit_seconds)


def test_the_state_is_written_first_and_chunks_by_rename_then_read_back_in_any_order(tmp_path):
    folder = tmp_path / "out.h5.partial"
    kept = _open(folder)
    assert [p.name for p in folder.iterdir()] == [STATE]
    assert json.loads((folder / STATE).read_text())["options"] == {"model": "m"}
    first, second = _rows(["a", "b"]), _rows(["c"], seed=1)
    kept.add(["a", "b"], first)
    kept.add(["c"], second)
    assert sorted(p.name for p in folder.iterdir()) == ["chunk-000000.h5", "chunk-000001.h5", STATE]
    blocks = list(kept.gather(["c", "a", "b"], block=2))
    assert [ids for ids, _ in blocks] == [["c", "a"], ["b"]]
    np.testing.assert_array_equal(np.concatenate([arrays["rows"] for _, arrays in blocks]),
                                  np.concatenate([second["rows"], first["rows"]]))
    kept.remove()
    assert not folder.exists()


def test_a_plain_run_never_destroys_finished_chunks_and_a_resume_keeps_them(tmp_path, caplog):
    folder = tmp_path / "out.h5.partial"
    _open(folder).add(["a"], _rows(["a"]))
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(VLToolsError, match="left by an interrupted run; continue it with resume=True, or delete it"):
        _open(folder)
    assert sorted(p.name for p in folder.iterdir()) == before
    with caplog.at_level(logging.WARNING):
        resumed = _open(folder, resume=True)
    assert resumed.done == {"a"} and not caplog.records


def test_a_resume_with_other_options_is_refused_naming_the_first_difference(tmp_path):
    folder = tmp_path / "out.h5.partial"
    _open(folder, options={"model": "m", "beam": 3}).add(["a"], _rows(["a"]))
    with pytest.raises(VLToolsError, match=r"the interrupted run used beam 3, this run 5; resume with the same "
                                           r"options, or delete .*out.h5.partial and run without resume=True"):
        _open(folder, resume=True, options={"model": "m", "beam": 5})
    with pytest.raises(VLToolsError, match="its state.json is missing or not this stage's"):
        _open(folder, resume=True, options={"model": "m", "beam": 3}, codec=Records())


def test_items_whose_inputs_changed_are_computed_again_and_counted(tmp_path, caplog):
    folder = tmp_path / "out.h5.partial"
    _open(folder, digests={"a": "1", "b": "1", "c": "1"}).add(["a", "b", "c"], _rows(["a", "b", "c"]))
    with caplog.at_level(logging.WARNING):
        resumed = _open(folder, resume=True, digests={"a": "1", "b": "2", "c": "1"})
    assert resumed.done == {"a", "c"}
    assert "the inputs of 1 finished items changed since the interrupted run" in caplog.text
    fresh = _rows(["b"], seed=7)
    resumed.add(["b"], fresh)
    np.testing.assert_array_equal(next(resumed.gather(["b"]))[1]["rows"], fresh["rows"])
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert _open(folder, resume=True, digests={"a": "1", "b": "2", "c": "1"}).done == {"a", "b", "c"}
    assert not caplog.records


def test_chunks_are_committed_once_commit_seconds_passed_since_the_last_commit(tmp_path, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(checkpoint_module.time, "monotonic", lambda: now[0])
    folder = tmp_path / "out.h5.partial"
    kept = _open(folder, commit_seconds=10)
    kept.add(["a"], _rows(["a"]))
    now[0] += 5
    kept.add(["b"], _rows(["b"]))
    assert sorted(p.name for p in folder.iterdir()) == ["chunk-000000.h5.tmp", STATE]
    now[0] += 5
    kept.add(["c"], _rows(["c"]))
    assert sorted(p.name for p in folder.iterdir()) == ["chunk-000000.h5", STATE]
    kept.add(["d"], _rows(["d"]))
    assert sorted(p.name for p in folder.iterdir()) == ["chunk-000000.h5", "chunk-000001.h5.tmp", STATE]


def test_discard_commits_a_whole_open_chunk_and_drops_one_a_failed_write_cut(tmp_path):
    folder = tmp_path / "out.h5.partial"
    kept = _open(folder, commit_seconds=3600)
    kept.add(["a", "b"], _rows(["a", "b"]))
    kept.discard()
    assert sorted(p.name for p in folder.iterdir()) == ["chunk-000000.h5", STATE]
    resumed = _open(folder, resume=True, commit_seconds=3600)
    with pytest.raises(ValueError):
        resumed.add(["c"], {"rows": np.zeros((2, 3), np.float32)})     # two rows for one id: the write fails
    resumed.discard()
    assert resumed.done == {"a", "b"} and sorted(p.name for p in folder.iterdir()) == ["chunk-000000.h5", STATE]
    empty = tmp_path / "empty.h5.partial"
    _open(empty).discard()
    assert not empty.exists()


@pytest.mark.parametrize("resume", [False, True])
def test_a_folder_holding_a_foreign_file_or_an_older_layout_is_refused_and_left_as_it_is(tmp_path, resume):
    folder = tmp_path / "out.h5.partial"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(VLToolsError, match="holds notes.txt, which no vltools run wrote there"):
        _open(folder, resume=resume)
    (folder / "notes.txt").unlink()
    (folder / "part-000000.h5").write_bytes(b"older")
    with pytest.raises(VLToolsError, match=r"left by an older vltools \(part-NNNNNN.h5 files\); delete it"):
        _open(folder, resume=resume)
    file = tmp_path / "caps.jsonl.partial"
    file.write_text('{"resume_state": {}}\n')
    with pytest.raises(VLToolsError, match="a file left by an older vltools .*; delete it and run again"):
        _open(file, resume=resume, codec=Records())
    assert (folder / "part-000000.h5").read_bytes() == b"older" and file.read_text() == '{"resume_state": {}}\n'


def test_records_are_kept_with_their_ids_and_read_back_in_order(tmp_path):
    folder = tmp_path / "caps.jsonl.partial"
    kept = _open(folder, codec=Records())
    kept.add(["x", "y"], [{"image_id": "x", "caption": "é"}, {"image_id": "y", "caption": "two"}])
    kept.add(["z"], [{"image_id": "z", "caption": "three"}])
    resumed = _open(folder, resume=True, codec=Records())
    assert [record["caption"] for _, block in resumed.gather(["z", "x", "y"]) for record in block] == \
        ["three", "é", "two"]


def test_reading_many_chunks_back_holds_few_open(tmp_path, monkeypatch):
    """Reading every chunk at once would pass the open-files limit after hours of short commits."""
    monkeypatch.setattr(checkpoint_module, "OPEN_READERS", 2)
    opened, open_now, most = [], set(), [0]
    real = checkpoint_module.open_h5

    def counted(path):
        handle = real(path)
        opened.append(path.name)
        open_now.add(id(handle))
        most[0] = max(most[0], len(open_now))
        close = handle.close
        handle.close = lambda: (open_now.discard(id(handle)), close())
        return handle

    kept = _open(tmp_path / "out.h5.partial")
    want = {}
    for number in range(5):
        ids = [f"c{number}r{row}" for row in range(2)]
        rows = _rows(ids, seed=number)
        kept.add(ids, rows)
        want.update(zip(ids, rows["rows"], strict=True))
    monkeypatch.setattr(checkpoint_module, "open_h5", counted)
    order = sorted(want, key=lambda i: (i[-1], i))      # rows of every chunk in each block of 3
    got = np.concatenate([arrays["rows"] for _, arrays in kept.gather(order, block=3)])
    assert np.array_equal(got, np.stack([want[i] for i in order]))
    assert most[0] <= 2 and not open_now


class _Stop(BaseException):
    """What the test's SIGTERM handler raises (as the CLI's raises Terminated)."""


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_signals_held_acts_on_ctrl_c_and_sigterm_once_the_write_is_done(number):
    """A Ctrl-C in the middle of a chunk's write left datasets and ids of different lengths; the signal now waits."""
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
