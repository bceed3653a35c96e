"""The one inference runner: shards, resume after a failure, records and rows kept by the checkpoint, read back in
input order."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.infer import runner
from vltools.infer.caption import checked_captions
from vltools.io.checkpoint import Records, Rows
from vltools.io.features import FeaturesReader, field_dtypes, write_features
from vltools.io.progress import configure
from vltools.io.records import write_records
from vltools.io.shards import this_part

IDS = [f"im{n}" for n in range(7)]
FEATURES = Rows("float32", field_dtypes("float32"), "image id")


def write_checked(kept, out, order):
    """What the caption stage does at the end: check the captions, write them, drop the checkpoint."""
    count = write_records(out, checked_captions(kept, order, "model.pt"))
    kept.remove()
    return count


def captions(todo, fail_at=None, seen=None):
    """A stand-in model step: batches of 3, caption = the id upside down; raises at `fail_at`."""
    for start in range(0, len(todo), 3):
        ids = todo[start:start + 3]
        if fail_at in ids:
            raise RuntimeError("killed")
        if seen is not None:
            seen.extend(ids)
        yield ids, [{"image_id": i, "caption": i[::-1]} for i in ids]


def test_a_part_takes_a_run_of_whole_batches_and_the_parts_together_take_every_id_once_in_order():
    parts = [this_part((index, 3), 0, 1, folder=True) for index in range(3)]
    assert [runner.part_ids(IDS, part, 2) for part in parts] == [["im0", "im1"], ["im2", "im3"], ["im4", "im5", "im6"]]
    assert runner.part_ids(IDS, None, 2) == IDS


def test_records_resume_after_a_failure_and_recompute_nothing_done(tmp_path, capsys):
    configure()
    out = tmp_path / "caps.jsonl"
    with pytest.raises(RuntimeError), runner.checkpoint(str(out), Records(), {"--beam": 3}, "d", False, 0) as kept:
        runner.run("caption", IDS, kept, lambda todo: captions(todo, fail_at="im4"))
    assert not out.exists()
    assert sorted(p.name for p in (tmp_path / "caps.jsonl.partial").iterdir()) == ["chunk-000000.jsonl", "state.json"]
    seen: list[str] = []
    capsys.readouterr()
    with runner.checkpoint(str(out), Records(), {"--beam": 3}, "d", True, 0) as kept:
        assert runner.run("caption", IDS, kept, lambda todo: captions(todo, seen=seen)) == 4
        assert write_checked(kept, str(out), IDS) == 7
    assert capsys.readouterr().err == f"vltools: caption: resuming {out}: 3 of 7 items kept from an interrupted run\n"
    assert seen == IDS[3:]
    assert [json.loads(line) for line in out.read_text().splitlines()] == \
        [{"image_id": i, "caption": i[::-1]} for i in IDS]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caps.jsonl"]


def test_resume_with_other_options_is_refused(tmp_path):
    out = tmp_path / "caps.jsonl"
    with pytest.raises(RuntimeError), runner.checkpoint(str(out), Records(), {"--beam": 3}, "d", False, 0) as kept:
        runner.run("caption", IDS, kept, lambda todo: captions(todo, fail_at="im4"))
    with pytest.raises(VLToolsError, match="the interrupted run used --beam 3, this run 5"):
        with runner.checkpoint(str(out), Records(), {"--beam": 5}, "d", True, 0):
            pass


def test_a_failure_before_any_result_leaves_nothing(tmp_path):
    out = tmp_path / "caps.jsonl"
    with pytest.raises(RuntimeError), runner.checkpoint(str(out), Records(), {}, "d", False, 0) as kept:
        runner.run("caption", IDS, kept, lambda todo: captions(todo, fail_at="im0"))
    assert list(tmp_path.iterdir()) == []


def test_rows_are_written_in_input_order_whatever_order_a_step_returns_them(tmp_path):
    out = tmp_path / "feats.h5"
    rows = {i: np.full((2, 4), n, dtype=np.float32) for n, i in enumerate(IDS)}

    def regions(todo):
        for start in range(0, len(todo), 2):
            ids = todo[start:start + 2][::-1]   # a step may return its batch in any order
            yield ids, {"regions": np.stack([rows[i] for i in ids])}

    with runner.checkpoint(str(out), FEATURES, {}, "d", False, 0.0) as kept:
        assert runner.run("extract", IDS, kept, regions) == 7
        assert write_features(str(out), {"backbone": "test"}, "float32", kept.gather(IDS), []) == 7
        kept.remove()
    with FeaturesReader(out) as reader:
        assert list(reader.ids) == IDS
        assert np.array_equal(reader.read(IDS, ["regions"])["regions"], np.stack([rows[i] for i in IDS]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feats.h5"]


def _regions(rows, interrupt_after=None):
    """A stand-in extractor (batches of 2); Ctrl-C once `interrupt_after` items are done."""
    def produce(todo):
        for start in range(0, len(todo), 2):
            if interrupt_after is not None and start >= interrupt_after:
                raise KeyboardInterrupt
            ids = todo[start:start + 2]
            yield ids, {"regions": np.stack([rows[i] for i in ids])}
    return produce


def test_an_interrupted_run_keeps_its_finished_rows_for_resume_and_says_how_many(tmp_path, capsys):
    """A run stopped by Ctrl-C or SIGTERM before its first commit keeps its finished rows (the open chunk is
    committed), and --resume says how many it keeps, or that there is nothing to resume."""
    configure()
    out = tmp_path / "feats.h5"
    rows = {i: np.full((2, 4), n, dtype=np.float32) for n, i in enumerate(IDS)}
    with pytest.raises(KeyboardInterrupt), runner.checkpoint(str(out), FEATURES, {}, "d", False, 3600.0) as kept:
        runner.run("extract-regions", IDS, kept, _regions(rows, interrupt_after=4), "images")
    assert not out.exists()
    assert sorted(p.name for p in (tmp_path / "feats.h5.partial").iterdir()) == ["chunk-000000.h5", "state.json"]
    capsys.readouterr()
    with runner.checkpoint(str(out), FEATURES, {}, "d", True, 3600.0) as kept:
        assert runner.run("extract-regions", IDS, kept, _regions(rows), "images") == 3
        write_features(str(out), {}, "float32", kept.gather(IDS))
        kept.remove()
    assert capsys.readouterr().err == \
        f"vltools: extract-regions: resuming {out}: 4 of 7 images kept from an interrupted run\n"
    with FeaturesReader(out) as reader:
        assert list(reader.ids) == IDS
        assert np.array_equal(reader.read(IDS, ["regions"])["regions"], np.stack([rows[i] for i in IDS]))
    out.unlink()
    with runner.checkpoint(str(out), FEATURES, {}, "d", True, 3600.0) as kept:
        assert runner.run("extract-regions", IDS, kept, _regions(rows), "images") == 7
    assert capsys.readouterr().err == \
        f"vltools: extract-regions: nothing to resume for {out}; starting from the beginning\n"


def test_resume_needs_an_output_file():
    with pytest.raises(VLToolsError, match="--resume needs -o PATH"):
        runner.check_output(None, True)
    runner.check_output(None, False)


@pytest.mark.parametrize("to_file", [True, False])
def test_captions_refused_as_a_whole_leave_nothing_not_even_the_checkpoint(tmp_path, capsys, to_file):
    """Results refused as a whole (caption: all empty) are not worth resuming: no OUT, no OUT.partial/."""
    out = str(tmp_path / "caps.jsonl") if to_file else None

    def empty(todo):
        for ids, records in captions(todo):
            yield ids, [{**record, "caption": ""} for record in records]

    with pytest.raises(VLToolsError, match="all 7 captions it wrote are empty"), \
            runner.checkpoint(out, Records(), {}, "d", False) as kept:
        runner.run("caption", IDS, kept, empty)
        write_checked(kept, out, list(reversed(IDS)))
    assert list(tmp_path.iterdir()) == [] and capsys.readouterr().out == ""
    with runner.checkpoint(out, Records(), {}, "d", False) as kept:      # captions that pass are written, in order
        runner.run("caption", IDS, kept, captions)
        assert write_checked(kept, out, list(reversed(IDS))) == len(IDS)
    written = (tmp_path / "caps.jsonl").read_text() if to_file else capsys.readouterr().out
    assert [json.loads(line)["image_id"] for line in written.splitlines()] == list(reversed(IDS))
    assert sorted(p.name for p in tmp_path.iterdir()) == (["caps.jsonl"] if to_file else [])


@pytest.mark.parametrize("field", ["boxes", "label_scores"])
def test_nan_detector_outputs_are_refused_by_id_naming_the_output_and_leave_no_checkpoint(tmp_path, field):
    """The tester's detector with NaN weights: a NaN box or score is refused as it is kept, naming OUT, and the
    run's failure removes a checkpoint that holds no finished chunk."""
    out = tmp_path / "feats.h5"
    rows = {"regions": np.zeros((2, 2, 3), np.float32)}
    bad = {"boxes": np.zeros((2, 2, 4), np.float32), "label_scores": np.zeros((2, 2), np.float32)}
    bad[field][1] = np.nan

    def produce(ids):
        yield ids, {**rows, **bad}

    with pytest.raises(VLToolsError) as error, \
            runner.checkpoint(str(out), Rows("float16", field_dtypes("float16"), "image id"), {}, "d", False) as kept:
        runner.run("extract-regions", ["a", "b"], kept, produce)
    assert str(error.value) == f"{out}: image id 'b': the model gave NaN or infinite /{field} values; check the " \
                               "weights and the image"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("to_file", [True, False])
def test_computed_rows_come_back_in_order_and_leave_no_checkpoint(tmp_path, to_file):
    out = str(tmp_path / "emb.h5") if to_file else None
    vectors = np.arange(len(IDS) * 3, dtype=np.float32).reshape(len(IDS), 3)

    def compute(positions):
        for start in range(0, len(positions), 2):
            yield vectors[positions[start:start + 2]]

    with runner.computed_rows("encode", out, IDS, compute, "images", 2, {"model": "m"}, "d", False,
                              Rows("float32")) as blocks:
        assert np.array_equal(np.concatenate(list(blocks)), vectors)
        if to_file:
            assert sorted(p.name for p in (tmp_path / "emb.h5.partial").iterdir()) == ["chunk-000000.h5", "state.json"]
    assert list(tmp_path.iterdir()) == []


def test_non_finite_results_are_refused_naming_the_id_and_the_precision_and_the_blocks_are_closed():
    closed = []

    def blocks():
        try:
            yield np.ones((2, 3), dtype=np.float32)
            yield np.array([[1.0], [np.inf]], dtype=np.float32)
            yield np.ones((1, 3), dtype=np.float32)
        finally:
            closed.append(True)

    found = runner.finite_results(blocks(), ["a", "b", "c", "d", "e"], "similarities", "caption id", "fp16")
    assert next(found).shape == (2, 3)
    with pytest.raises(VLToolsError) as error:
        next(found)
    assert str(error.value) == ("caption id 'd': the model gave NaN or infinite similarities under precision=fp16; "
                                "run with precision=fp32 (or bf16, which keeps float32's range)")
    assert closed == [True]     # closed at the refusal, not when the traceback goes
