"""The one inference runner: shards, resume after a failure, records and features writers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.infer import runner
from vltools.io.features import FeaturesReader
from vltools.io.parts import PartsWriter
from vltools.io.progress import configure

IDS = [f"im{n}" for n in range(7)]


def captions(todo, fail_at=None, seen=None):
    """A stand-in model step: batches of 3, caption = the id upside down; raises at `fail_at`."""
    for start in range(0, len(todo), 3):
        ids = todo[start:start + 3]
        if fail_at in ids:
            raise RuntimeError("killed")
        if seen is not None:
            seen.extend(ids)
        yield ids, [{"image_id": i, "caption": i[::-1]} for i in ids]


def test_shard_ids_takes_every_nth_from_i():
    assert runner.shard_ids(IDS, "1/3") == ["im1", "im4"]
    assert runner.shard_ids(IDS, None) == IDS


def test_records_resume_after_a_failure_and_recompute_nothing_done(tmp_path, capsys):
    configure()
    out = tmp_path / "caps.jsonl"
    with pytest.raises(RuntimeError), runner.records_writer(str(out), "image_id", False, {"--beam": 3}, {}) as writer:
        runner.run("caption", IDS, writer, lambda todo: captions(todo, fail_at="im4"))
    assert not out.exists() and len((tmp_path / "caps.jsonl.partial").read_text().splitlines()) == 1 + 3
    seen: list[str] = []
    capsys.readouterr()
    with runner.records_writer(str(out), "image_id", True, {"--beam": 3}, {}) as writer:
        assert runner.run("caption", IDS, writer, lambda todo: captions(todo, seen=seen)) == 4
        assert writer.finish(IDS) == 7
    assert capsys.readouterr().err == f"vltools: caption: resuming {out}: 3 of 7 items kept from an interrupted run\n"
    assert seen == IDS[3:]
    assert [json.loads(line) for line in out.read_text().splitlines()] == \
        [{"image_id": i, "caption": i[::-1]} for i in IDS]
    assert not (tmp_path / "caps.jsonl.partial").exists()


def test_resume_with_other_options_is_refused(tmp_path):
    out = tmp_path / "caps.jsonl"
    with pytest.raises(RuntimeError), runner.records_writer(str(out), "image_id", False, {"--beam": 3}, {}) as writer:
        runner.run("caption", IDS, writer, lambda todo: captions(todo, fail_at="im4"))
    with pytest.raises(VLToolsError, match="the interrupted run used --beam 3, this run 5"):
        with runner.records_writer(str(out), "image_id", True, {"--beam": 5}, {}):
            pass


def test_a_failure_before_any_result_leaves_nothing(tmp_path):
    out = tmp_path / "caps.jsonl"
    with pytest.raises(RuntimeError), runner.records_writer(str(out), "image_id", False, {}, {}) as writer:
        runner.run("caption", IDS, writer, lambda todo: captions(todo, fail_at="im0"))
    assert list(tmp_path.iterdir()) == []


def test_features_parts_are_merged_in_input_order(tmp_path):
    out = tmp_path / "feats.h5"
    rows = {i: np.full((2, 4), n, dtype=np.float32) for n, i in enumerate(IDS)}

    def regions(todo):
        for start in range(0, len(todo), 2):
            ids = todo[start:start + 2][::-1]   # a step may return its batch in any order
            yield ids, {"regions": np.stack([rows[i] for i in ids])}

    attrs = {"backbone": "test"}
    with runner.features_writer(str(out), attrs, "float32", 0.0, False, {i: "d" for i in IDS}) as writer:
        assert runner.run("extract", IDS, writer, regions) == 7
        assert runner.finish_features(writer, str(out), attrs, IDS, []) == 7
    with FeaturesReader(out) as reader:
        assert list(reader.ids) == IDS
        assert np.array_equal(reader.read(IDS, ["regions"])["regions"], np.stack([rows[i] for i in IDS]))


def _regions(rows, interrupt_after=None):
    """A stand-in extractor (batches of 2); Ctrl-C once `interrupt_after` items are done."""
    def produce(todo):
        for start in range(0, len(todo), 2):
            if interrupt_after is not None and start >= interrupt_after:
                raise KeyboardInterrupt
            ids = todo[start:start + 2]
            yield ids, {"regions": np.stack([rows[i] for i in ids])}
    return produce


def test_an_interrupted_features_run_without_resume_keeps_its_finished_rows_for_resume(tmp_path, capsys):
    """A plain extract-regions stopped by Ctrl-C or SIGTERM before its first commit kept nothing (the open part was
    dropped), and --resume then said nothing; the finished rows are now committed, and --resume says how many it
    keeps, or that there is nothing to resume."""
    configure()
    out = tmp_path / "feats.h5"
    rows = {i: np.full((2, 4), n, dtype=np.float32) for n, i in enumerate(IDS)}
    attrs = {"backbone": "test"}
    digests = {i: "d" for i in IDS}
    with pytest.raises(KeyboardInterrupt), \
            runner.features_writer(str(out), attrs, "float32", 3600.0, False, digests) as writer:
        runner.run("extract-regions", IDS, writer, _regions(rows, interrupt_after=4), "images")
    assert not out.exists() and [p.name for p in (tmp_path / "feats.h5.partial").iterdir()] == ["part-000000.h5"]
    capsys.readouterr()
    with runner.features_writer(str(out), attrs, "float32", 3600.0, True, digests) as writer:
        assert runner.run("extract-regions", IDS, writer, _regions(rows), "images") == 3
        runner.finish_features(writer, str(out), attrs, IDS, [])
    assert capsys.readouterr().err == \
        f"vltools: extract-regions: resuming {out}: 4 of 7 images kept from an interrupted run\n"
    with FeaturesReader(out) as reader:
        assert list(reader.ids) == IDS
        assert np.array_equal(reader.read(IDS, ["regions"])["regions"], np.stack([rows[i] for i in IDS]))
    out.unlink()
    with runner.features_writer(str(out), attrs, "float32", 3600.0, True, digests) as writer:
        assert runner.run("extract-regions", IDS, writer, _regions(rows), "images") == 7
    assert capsys.readouterr().err == \
        f"vltools: extract-regions: nothing to resume for {out}; starting from the beginning\n"


def test_resume_needs_an_output_file():
    with pytest.raises(VLToolsError, match="--resume needs -o PATH"):
        runner.check_output(None, True)
    runner.check_output(None, False)


@pytest.mark.parametrize("to_file", [True, False])
def test_a_check_that_refuses_the_records_leaves_nothing_not_even_the_partial(tmp_path, capsys, to_file):
    """Results refused as a whole (caption: all empty) are not worth resuming: no OUT, no OUT.partial."""
    out = str(tmp_path / "caps.jsonl") if to_file else None
    seen: list[list[dict]] = []

    def refuse(records):
        seen.append(records)
        raise VLToolsError("refused")

    with pytest.raises(VLToolsError, match="refused"), \
            runner.records_writer(out, "image_id", False, {}, {}) as writer:
        runner.run("caption", IDS, writer, captions)
        writer.finish(list(reversed(IDS)), refuse)
    assert seen == [[{"image_id": i, "caption": i[::-1]} for i in reversed(IDS)]]
    assert list(tmp_path.iterdir()) == [] and capsys.readouterr().out == ""
    with runner.records_writer(out, "image_id", False, {}, {}) as writer:      # a check that passes writes all
        runner.run("caption", IDS, writer, captions)
        assert writer.finish(IDS, seen.append) == len(IDS)
    written = (tmp_path / "caps.jsonl").read_text() if to_file else capsys.readouterr().out
    assert [json.loads(line)["image_id"] for line in written.splitlines()] == IDS


@pytest.mark.parametrize("field", ["boxes", "label_scores"])
def test_nan_detector_outputs_are_refused_by_id_naming_the_output_and_leave_no_partial_folder(tmp_path, field):
    """The tester's detector with NaN weights: the refusal named OUT.partial/part-000000.h5 'corrupt' at the merge
    and left OUT.partial/ behind; a NaN box or score is now refused as it is written, naming OUT, and the run's
    failure removes a folder that holds no finished part."""
    folder = tmp_path / "feats.h5.partial"
    writer = runner.FeaturesPartsWriter(PartsWriter(folder, {}, "float16", commit_seconds=3600, resume=False,
                                                    output="feats.h5"))
    rows = {"regions": np.zeros((2, 2, 3), np.float32)}
    bad = {"boxes": np.zeros((2, 2, 4), np.float32), "label_scores": np.zeros((2, 2), np.float32)}
    bad[field][1] = np.nan

    def produce(ids):
        yield ids, {**rows, **bad}

    with pytest.raises(VLToolsError) as error:
        runner.run("extract-regions", ["a", "b"], writer, produce)
    assert str(error.value) == f"feats.h5: image id 'b': the model gave NaN or infinite /{field} values; check the " \
                               "weights and the image"
    assert not folder.exists()


def test_failures_are_listed_in_input_order():
    """As one process lists them, whichever process of a torchrun job met them first."""
    assert runner.gathered_failures(["im4\tbad", "im1\tworse"], IDS) == ["im1\tworse", "im4\tbad"]
