"""`vltools caption`: batched captions equal image-by-image decoding, order, --resume, --shard, --logp, errors."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from tiny_captioning import make_caption_world, save_captioner

from vltools.cli import cli, main
from vltools.data.captioning import image_tensors
from vltools.decoding import beam_search
from vltools.decoding.captioner import load_captioner
from vltools.io.checkpoints import save_checkpoint
from vltools.io.features import FeaturesReader
from vltools.io.records import read_records, write_records
from vltools.text.captions import decode

AA, NT = "adaptive-attention", "neuraltalk2"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("captionworld")
    features, captions = make_caption_world(folder)
    return folder, features, captions, save_captioner(folder / "aa.pt", AA, captions), \
        save_captioner(folder / "nt.pt", NT, captions)


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
    loaded = load_captioner(checkpoints[name == NT])
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
    shard = run("caption", "--model", aa, features, "--beam", "1", "--shard", "1/3")
    assert shard == greedy[1::3]


def test_resume_keeps_finished_images_and_writes_input_order(world, tmp_path):
    folder, features, captions, aa, _ = world
    output = tmp_path / "caps.jsonl"
    done = {"image_id": "img004", "caption": "already done"}
    (tmp_path / "caps.jsonl.partial").write_text(json.dumps(done) + "\n" + '{"image_id": "img0', encoding="utf-8")
    run("caption", "--model", aa, features, "--beam", "1", "-o", output, "--resume")
    records = [json.loads(line) for line in output.read_text().splitlines()]
    full = run("caption", "--model", aa, features, "--beam", "1")
    assert records == [done if r["image_id"] == "img004" else r for r in full]
    assert not (tmp_path / "caps.jsonl.partial").exists()


def test_logp_matrix_scores_every_caption_under_every_image(world, tmp_path):
    folder, features, captions, aa, _ = world
    generated = tmp_path / "gen.jsonl"
    write_records(generated, [{"image_id": "img021", "caption": "a red cube"},
                              {"image_id": "img025", "caption": "dog and tree zebra"},
                              {"image_id": "img021", "caption": "a cat"}])
    run("caption", "--logp", "--model", aa, features, generated, "-o", tmp_path / "logp.h5", "--block-images", "1",
        "--block-captions", "2")
    with h5py.File(tmp_path / "logp.h5") as handle:
        logp = handle["logp"][()]
        assert [x.decode() for x in handle["image_ids"][()]] == ["img021", "img025"]
        assert [x.decode() for x in handle["caption_image_ids"][()]] == ["img021", "img025", "img021"]
    loaded = load_captioner(aa)
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
    save_checkpoint(tmp_path / "vse.pt", "vse", {}, {}, vocab=["<pad>", "<start>", "<end>", "<unk>"])
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
