"""`vltools caption`: batched captions equal image-by-image decoding, order, --resume, --shard, --logp, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from kill_helpers import killed_midway
from pipeline_fixtures import merged, one_and_two_processes, same_but_created
from tiny_captioning import make_caption_world, mute_captioner, save_captioner

import vltools.infer.caption as caption_step  # the caption stage imports its steps from here when it runs
from vltools.cli import cli, main
from vltools.data.captioning import image_tensors
from vltools.decoding import beam_search
from vltools.errors import VLToolsError
from vltools.infer.loader import load_model
from vltools.io.checkpoints import load_checkpoint, save_checkpoint
from vltools.io.features import FeaturesReader
from vltools.io.progress import log
from vltools.io.records import read_records, write_records
from vltools.text.captions import decode

AA, NT = "adaptive-attention", "neuraltalk2"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("captionworld")
    features, captions = make_caption_world(folder)
    return folder, features, captions, save_captioner(folder / "aa.pt", AA, captions), \
        save_captioner(folder / "nt.pt", NT, captions, seed=2)    # seed 0 ends every caption at once


def run(*args) -> list[dict]:
    result = CliRunner().invoke(cli, ["--quiet", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def fails(capsys, *args) -> str:
    with pytest.raises(SystemExit) as exc:
        main(["--quiet", *map(str, args)])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("vltools: error: ") and err.count("\n") == 1
    return err


@pytest.mark.parametrize("name", [AA, NT])
def test_batched_beam_captions_equal_image_by_image_decoding_in_input_order(world, name):
    folder, features, captions, *checkpoints = world
    out = run("caption", "--model", checkpoints[name == NT], features, captions, "--split", "test", "--beam", "3",
              "--batch-size", "4")
    expected_ids = list(dict.fromkeys(r["image_id"] for r in read_records(captions, "captions")
                                      if r["split"] == "test"))
    assert [r["image_id"] for r in out] == expected_ids
    loaded = load_model(checkpoints[name == NT], "captioner")
    with FeaturesReader(features) as reader, torch.no_grad():
        for record in out:
            fields = list(loaded.model.features)
            images = image_tensors(reader.read([record["image_id"]], fields))
            one = beam_search(loaded.model.step, *loaded.model.init_state(images), beam_size=3, max_len=16)
            assert record["caption"] == decode(loaded.vocab, one.tokens)[0]


def test_greedy_sample_shard_and_all_images(world):
    folder, features, captions, aa, _ = world
    greedy = run("caption", "--model", aa, features, "--beam", "1")
    assert [r["image_id"] for r in greedy] == [f"img{i:03d}" for i in range(30)]
    first = run("caption", "--model", aa, features, "--sample", "--temperature", "2", "--seed", "3")
    again = run("caption", "--model", aa, features, "--sample", "--temperature", "2", "--seed", "3")
    assert first == again and first != greedy
    shard = run("caption", "--model", aa, features, "--beam", "1", "--shard", "1/3", "--batch-size", "4")
    assert shard == greedy[8:20]      # batches 2, 3 and 4 of the 8 batches of 4


def interrupted(monkeypatch, batches_done: int):
    """Make caption's decoding stop (as a kill would) after `batches_done` batches; undo with monkeypatch.undo()."""
    real = caption_step.caption_batches

    def stopping(*args, **kwargs):
        for number, batch in enumerate(real(*args, **kwargs)):
            if number == batches_done:
                raise VLToolsError("stopped by the test")
            yield batch
        raise VLToolsError("stopped by the test")

    monkeypatch.setattr(caption_step, "caption_batches", stopping)


def test_resume_keeps_finished_images_and_writes_input_order(world, tmp_path, capsys, monkeypatch):
    folder, features, captions, aa, _ = world
    output, partial = tmp_path / "caps.jsonl", tmp_path / "caps.jsonl.partial"
    interrupted(monkeypatch, 1)
    assert "stopped by the test" in fails(capsys, "caption", "--model", aa, features, "--beam", "1", "-o", output,
                                          "--batch-size", "4")
    monkeypatch.undo()
    chunk = partial / "chunk-000000.jsonl"
    lines = [json.loads(line) for line in chunk.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 4 and not output.exists()       # the 4 finished images, committed as the run stopped
    assert sorted(p.name for p in partial.iterdir()) == [chunk.name, "state.json"]
    done = {"image_id": lines[1]["id"], "caption": "already done"}
    lines[1]["record"] = done
    chunk.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert "--resume" in fails(capsys, "caption", "--model", aa, features, "--beam", "1", "-o", output)
    run("caption", "--model", aa, features, "--beam", "1", "-o", output, "--resume", "--batch-size", "7")
    records = [json.loads(line) for line in output.read_text().splitlines()]
    full = run("caption", "--model", aa, features, "--beam", "1")
    assert records == [done if r["image_id"] == done["image_id"] else r for r in full]
    assert not partial.exists()


def test_resume_refuses_other_options_and_computes_changed_inputs_again(world, tmp_path, capsys, monkeypatch):
    folder, features, captions, aa, nt = world
    copy = tmp_path / "feats.h5"
    copy.write_bytes(features.read_bytes())
    output, partial = tmp_path / "caps.jsonl", tmp_path / "caps.jsonl.partial"
    interrupted(monkeypatch, 1)
    fails(capsys, "caption", "--model", aa, copy, "--beam", "2", "-o", output, "--batch-size", "4")
    monkeypatch.undo()
    before = {p.name: p.read_bytes() for p in partial.iterdir()}
    resume = ("-o", output, "--resume")
    assert "the interrupted run used --beam 2, this run 3; resume with the same options, or delete " \
        f"{partial} and run without --resume" in fails(capsys, "caption", "--model", aa, copy, *resume)
    assert "the interrupted run used --length-penalty 0.0, this run 1.0" in fails(
        capsys, "caption", "--model", aa, copy, "--beam", "2", "--length-penalty", "1", *resume)
    assert "the interrupted run used --max-len 16, this run 5" in fails(
        capsys, "caption", "--model", aa, copy, "--beam", "2", "--max-len", "5", *resume)
    assert "the interrupted run used --sample False, this run True" in fails(
        capsys, "caption", "--model", aa, copy, "--sample", *resume)
    assert {p.name: p.read_bytes() for p in partial.iterdir()} == before and not output.exists()  # nothing changed
    os.utime(copy, ns=(os.stat(copy).st_atime_ns, os.stat(copy).st_mtime_ns + 10**9))
    result = CliRunner().invoke(cli, ["caption", "--model", str(aa), str(copy), "--beam", "2", "-o", str(output),
                                      "--resume"], catch_exceptions=False)
    assert result.exit_code == 0, result.output      # inputs changed since: their captions are computed again
    assert "the inputs of 4 finished items changed since the interrupted run" in result.stderr
    assert [json.loads(line) for line in output.read_text().splitlines()] == \
        run("caption", "--model", aa, copy, "--beam", "2")


def test_a_failed_run_with_nothing_finished_leaves_no_partial(world, tmp_path, capsys, monkeypatch):
    folder, features, captions, aa, _ = world
    output = tmp_path / "caps.jsonl"
    interrupted(monkeypatch, 0)
    fails(capsys, "caption", "--model", aa, features, "--beam", "1", "-o", output)
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "caps.jsonl.partial").mkdir()                         # killed as it started: no chunk yet
    (tmp_path / "caps.jsonl.partial" / "state.json").write_text('{"format": "vltools-check', encoding="utf-8")
    run("caption", "--model", aa, features, "--beam", "1", "-o", output)
    assert [json.loads(line) for line in output.read_text().splitlines()] == \
        run("caption", "--model", aa, features, "--beam", "1")
    assert list(tmp_path.iterdir()) == [output]


def test_shard_out_of_range_is_a_usage_error(world, capsys):
    folder, features, captions, aa, _ = world
    with pytest.raises(SystemExit) as exc:
        main(["--quiet", "caption", "--model", str(aa), str(features), "--shard", "3/2"])
    assert exc.value.code == 2
    assert "need 0 <= i < n" in capsys.readouterr().err


def test_checkpoint_weights_that_do_not_fit_name_the_file(world, tmp_path, capsys):
    folder, features, captions, aa, _ = world
    payload = load_checkpoint(aa)
    state = dict(payload["state_dict"])
    state.pop(sorted(state)[0])
    broken = tmp_path / "broken.pt"
    save_checkpoint(broken, payload["model"], payload["config"], state, vocab=payload["vocab"],
                    train_state=payload["train_state"], schema=payload["schema"])
    assert f"{broken}: checkpoint weights do not fit model" in fails(capsys, "caption", "--model", broken, features)


def test_logp_matrix_scores_every_caption_under_every_image(world, tmp_path):
    folder, features, captions, aa, _ = world
    generated = tmp_path / "gen.jsonl"
    write_records(generated, [{"image_id": "img021", "caption": "a red cube"},
                              {"image_id": "img025", "caption": "dog and tree zebra"},
                              {"image_id": "img021", "caption": "a cat"}])
    run("caption", "--logp", "--model", aa, features, generated, "-o", tmp_path / "logp.h5", "--block-images", "1",
        "--block-captions", "2", "--precision", "tf32")
    with h5py.File(tmp_path / "logp.h5") as handle:
        logp = handle["logp"][()]
        assert handle.attrs["precision"] == "tf32"   # the same numbers as fp32 on a CPU, and recorded
        assert [x.decode() for x in handle["image_ids"][()]] == ["img021", "img025"]
        assert [x.decode() for x in handle["caption_image_ids"][()]] == ["img021", "img025", "img021"]
    loaded = load_model(aa, "captioner")
    with FeaturesReader(features) as reader, torch.no_grad():
        for t, text in enumerate(["a red cube", "dog and tree zebra", "a cat"]):
            tokens = loaded.prep.encode_one(loaded.vocab, text)
            for j, image in enumerate(["img021", "img025"]):
                out = loaded.model(image_tensors(reader.read([image], ["regions"])), torch.tensor([tokens]))[0]
                direct = sum(float(out[s, tokens[s + 1]]) for s in range(len(tokens) - 1))
                assert logp[t, j] == pytest.approx(direct, abs=1e-4)
    assert np.isfinite(logp).all()


def test_bad_inputs_are_one_line_errors_and_write_nothing(world, tmp_path, capsys):
    folder, features, captions, aa, nt = world
    output = tmp_path / "out.jsonl"
    save_checkpoint(tmp_path / "vse.pt", "vse", {}, {}, vocab=["<pad>", "<start>", "<end>", "<unk>"], schema=1)
    assert "not a captioner" in fails(capsys, "caption", "--model", tmp_path / "vse.pt", features, "-o", output)
    with FeaturesReader(features) as reader:
        regions = reader.read(reader.ids, ["regions"])["regions"]
        ids = list(reader.ids)
    from vltools.io.features import FeaturesWriter
    with FeaturesWriter(tmp_path / "regions.h5", {"backbone": "tiny"}) as writer:
        writer.add(ids, regions=regions)
    assert "no /global dataset" in fails(capsys, "caption", "--model", nt, tmp_path / "regions.h5", "-o", output)
    unknown = tmp_path / "unknown.jsonl"
    write_records(unknown, [{"image_id": "nope", "caption": "a cat", "split": "test"}])
    assert "'nope' is not in" in fails(capsys, "caption", "--model", aa, features, unknown, "-o", output)
    assert "no captions in split 'dev'" in fails(capsys, "caption", "--model", aa, features, captions, "--split",
                                                 "dev", "-o", output)
    assert not output.exists()


@pytest.mark.parametrize("name", [AA, NT])
def test_features_of_another_width_than_the_checkpoint_are_refused_before_decoding(world, tmp_path, capsys, name):
    _, features, captions, _, _ = world
    wide = save_captioner(tmp_path / "wide.pt", name, captions, img_dim=24)    # the world's features are 16-d
    output = tmp_path / "out.jsonl"
    field = "regions" if name == AA else "global"
    err = fails(capsys, "caption", "--model", wide, features, "-o", output)
    assert f"{features}: /{field} is 16-d but the" in err and "trained on 24-d features" in err
    assert "trained on 24-d" in fails(capsys, "caption", "--model", wide, features, captions, "--logp", "-o",
                                      tmp_path / "logp.h5")
    assert not output.exists() and not (tmp_path / "logp.h5").exists()


def test_kill_9_part_way_then_resume_equals_an_uninterrupted_run(tmp_path):
    """SIGKILL at a point of the run's choosing (once a few captions are committed), then --resume."""
    features, captions = make_caption_world(tmp_path / "big", n_images=40, n_val=10)
    model = save_captioner(tmp_path / "aa.pt", AA, captions)
    args = ["caption", "--model", model, features, "--beam", "3", "--batch-size", "1"]
    output, partial = tmp_path / "caps.jsonl", tmp_path / "caps.jsonl.partial"
    killed_midway("vltools.io.checkpoint:Checkpoint.commit", 4, *args, "--checkpoint-seconds", "0", "-o", output)
    done = len(_kept(partial))
    assert not output.exists() and 4 <= done < 40
    result = CliRunner().invoke(cli, [*map(str, args), "-o", str(output), "--resume"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"caption: resuming {output}: {done} of 40 captions kept from an interrupted run\n" in result.stderr
    assert not partial.exists()
    resumed = [json.loads(line) for line in output.read_text().splitlines()]
    assert resumed == run(*args) and len(resumed) == 40


def _kept(partial: Path) -> list[str]:
    """The ids of the records in the committed chunks of checkpoint folder `partial`."""
    return [json.loads(line)["id"] for chunk in sorted(partial.glob("chunk-*.jsonl"))
            for line in chunk.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("to_stdout", [False, True])
def test_all_captions_empty_is_one_line_exit_1_and_writes_nothing(world, tmp_path, capsys, to_stdout):
    """`caption` once said `wrote 6 captions (beam 3)` when every caption was the empty string."""
    folder, features, captions, aa, _ = world
    mute = mute_captioner(aa, tmp_path / "mute.pt")
    output = tmp_path / "caps.jsonl"
    args = ["caption", "--model", mute, features, "--batch-size", "7", *([] if to_stdout else ["-o", output])]
    with pytest.raises(SystemExit) as exc:
        main(["--quiet", *map(str, args)])
    captured = capsys.readouterr()
    assert exc.value.code == 1 and captured.out == ""
    assert captured.err.strip().splitlines() == [
        f"vltools: error: {mute}: all 30 captions it wrote are empty (decoding ended at the first word), so nothing "
        "was written; check that the checkpoint is trained and that the features come from the extractor it was "
        "trained on"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mute.pt"]     # neither OUT nor OUT.partial


def test_more_than_a_tenth_of_captions_empty_is_one_warning(world, capsys, monkeypatch):
    folder, features, captions, aa, _ = world
    real = caption_step.caption_batches

    def blanking(*args, **kwargs):      # the first `blank` of the 30 images get an empty caption
        for ids, texts, logprob in real(*args, **kwargs):
            yield ids, ["" if int(i[3:]) < blank else text for i, text in zip(ids, texts, strict=True)], logprob

    monkeypatch.setattr(caption_step, "caption_batches", blanking)
    warnings: list[str] = []
    monkeypatch.setattr(log, "warning", lambda message, *args: warnings.append(message % args))
    for blank, warned in [(3, False), (4, True)]:
        warnings.clear()
        main(["--quiet", "caption", "--model", str(aa), str(features), "--beam", "1"])
        out = capsys.readouterr().out
        assert sum(json.loads(line)["caption"] == "" for line in out.splitlines()) == blank
        expected = ["4 of the 30 captions (13%) are empty (decoding ended at the first word): the checkpoint may be "
                    "undertrained, or the features unlike those it was trained on"] if warned else []
        assert warnings == expected


@pytest.mark.slow      # torchrun: processes of their own, 10-30 s
def test_torchrun_processes_write_their_parts_and_share_the_logp_matrix(world, tmp_path, monkeypatch):
    """30 images sampled in batches of 4 (process 0 samples batches 0-3 into its part, process 1 batches 4-7 into
    its own, each batch with its own keyed draws): the folder reads as the captions one process writes, and merged
    it is their bytes. log p(c | I), a matrix, has its blocks of 4 images shared and the first process write it."""
    _, features, captions, aa, _ = world
    one, two = one_and_two_processes(tmp_path / "sample", monkeypatch, "caption", "--model", aa, features,
                                     "--sample", "--temperature", "2", "--batch-size", "4", "--device", "cpu",
                                     "-o", "caps.jsonl")
    assert [len(read_records(part, "captions")) for part in sorted((two / "caps.jsonl").iterdir())] == [16, 14]
    assert read_records(two / "caps.jsonl", "captions") == read_records(one / "caps.jsonl", "captions")
    assert (one / "caps.jsonl").read_bytes() == merged(two / "caps.jsonl").read_bytes()
    one, two = one_and_two_processes(tmp_path / "logp", monkeypatch, "caption", "--model", aa, features, captions,
                                     "--split", "test", "--logp", "--block-images", "4", "--device", "cpu",
                                     "-o", "logp.h5")
    same_but_created(one / "logp.h5", two / "logp.h5")
