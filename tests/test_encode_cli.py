"""`vltools encode` + `vltools match` on two embeddings files equals `vltools match` through the model."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from kill_helpers import interrupted_then_resumed
from matching_helpers import VOCAB, fails, make_world, save_tiny
from pipeline_fixtures import merged, one_and_two_processes, same_but_created

import vltools
import vltools.infer.encode as encode_step
from vltools.cli import cli
from vltools.errors import VLToolsError
from vltools.io.checkpoints import save_checkpoint
from vltools.io.embeddings import read_embeddings
from vltools.io.features import FeaturesWriter
from vltools.io.hdf5 import decode_strings
from vltools.io.sims import read_sims
from vltools.models import build_model, default_config
from vltools.text.vocab import Vocabulary


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("encode")
    features, captions = make_world(folder, n_images=6, per_image=3)
    return folder, features, captions, save_tiny(folder / "vse.pt", "vse", 7), save_tiny(folder / "sgr.pt", "sgr", 8)


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["--quiet", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout      # warnings (e.g. the test world's unknown word "unseen") go to standard error


def test_embeddings_files(world):
    folder, features, captions, vse, _ = world
    run("encode", "--model", str(vse), str(features), "-o", str(folder / "all.h5"))
    run("encode", "--model", str(vse), str(captions), "-o", str(folder / "caps.h5"))
    with h5py.File(folder / "all.h5") as handle:
        assert handle.attrs["side"] == "images" and handle.attrs["model"] == "vse"
        assert len(decode_strings(handle["ids"][()])) == 8
        np.testing.assert_allclose(np.linalg.norm(handle["emb"][()], axis=1), 1.0, rtol=1e-5)
    with h5py.File(folder / "caps.h5") as handle:
        ids = decode_strings(handle["ids"][()])
        assert handle.attrs["side"] == "captions" and len(ids) == 18 and "train0" not in ids
        assert decode_strings(handle["caption_image_ids"][()]) == [i.split("#")[0] for i in ids]


def test_match_on_embeddings_equals_match_through_model(world):
    folder, features, captions, vse, _ = world
    run("encode", "--model", str(vse), str(features), "--captions", str(captions), "-o", str(folder / "img.h5"))
    run("encode", "--model", str(vse), str(captions), "-o", str(folder / "cap.h5"))
    via_files = run("match", str(folder / "img.h5"), str(folder / "cap.h5"), "--top-k", "5",
                    "--sims", str(folder / "emb_sims.h5"))
    via_model = run("match", "--model", str(vse), str(features), str(captions), "--top-k", "5",
                    "--sims", str(folder / "model_sims.h5"))
    for a, b in zip(via_files.splitlines(), via_model.splitlines(), strict=True):
        a, b = json.loads(a), json.loads(b)
        assert (a["query"], a["direction"], a["ids"]) == (b["query"], b["direction"], b["ids"])
        np.testing.assert_allclose(a["scores"], b["scores"], rtol=1e-5, atol=1e-6)
    from_files, from_model = read_sims(folder / "emb_sims.h5"), read_sims(folder / "model_sims.h5")
    assert from_files.image_ids == from_model.image_ids
    assert from_files.caption_image_ids == from_model.caption_image_ids
    np.testing.assert_allclose(from_files.sims, from_model.sims, rtol=1e-5, atol=1e-6)


def test_refusals(world, capsys):
    folder, features, captions, vse, sgr = world
    err = fails(capsys, "encode", "--model", str(sgr), str(features), "-o", str(folder / "x.h5"))
    assert "cross-attention" in err and not (folder / "x.h5").exists()
    run("encode", "--model", str(vse), str(features), "-o", str(folder / "i.h5"))
    run("encode", "--model", str(vse), str(captions), "-o", str(folder / "c.h5"))
    err = fails(capsys, "match", str(folder / "c.h5"), str(folder / "i.h5"))
    assert "image embeddings first" in err
    other = save_tiny(folder / "vse2.pt", "vse", 9)
    run("encode", "--model", str(other), str(captions), "-o", str(folder / "c2.h5"))
    err = fails(capsys, "match", str(folder / "i.h5"), str(folder / "c2.h5"))
    assert "another checkpoint" in err


def test_a_non_finite_embedding_row_is_refused_naming_its_id(world, capsys):
    folder, features, captions, vse, _ = world
    run("encode", "--model", str(vse), str(features), "-o", str(folder / "nan_img.h5"))
    run("encode", "--model", str(vse), str(captions), "-o", str(folder / "nan_cap.h5"))
    with h5py.File(folder / "nan_cap.h5", "r+") as handle:   # written through h5py: the checksum stays valid
        handle["emb"][2, 0] = np.nan
        bad = decode_strings(handle["ids"][()])[2]
    err = fails(capsys, "match", str(folder / "nan_img.h5"), str(folder / "nan_cap.h5"), "-o",
                str(folder / "nan.jsonl"))
    assert f"id {bad!r}: /emb holds NaN or infinite values" in err and not (folder / "nan.jsonl").exists()


@pytest.mark.parametrize(("source", "unit", "count"), [(0, "images", 8), (1, "captions", 18)])
def test_an_interrupted_plain_encode_continues_with_resume(world, tmp_path, capsys, monkeypatch, source, unit, count):
    """Issue 41: encode kept nothing of an interrupted run and had no --resume; its embeddings are now committed as
    they come, and --resume keeps them, says how many, and writes what an uninterrupted run writes."""
    folder, features, captions, vse, _ = world
    args = ["encode", "--model", str(vse), str([features, captions][source]), "--batch-size", "2"]
    run(*args, "-o", str(tmp_path / "whole.h5"))
    out = tmp_path / "out.h5"
    err = interrupted_then_resumed(monkeypatch, capsys, encode_step, "embed_blocks", 2, *args, "-o", out)
    assert f"encode: resuming {out}: 4 of {count} {unit} kept from an interrupted run\n" in err
    assert not (tmp_path / "out.h5.partial").exists()
    with h5py.File(tmp_path / "whole.h5") as whole, h5py.File(out) as resumed:
        assert decode_strings(whole["ids"][()]) == decode_strings(resumed["ids"][()])
        np.testing.assert_allclose(whole["emb"][()], resumed["emb"][()], rtol=1e-6, atol=1e-7)
        assert {k: str(v) for k, v in whole.attrs.items() if k not in ("command", "created")} == \
            {k: str(v) for k, v in resumed.attrs.items() if k not in ("command", "created")}


# ---- SCO "ctx + sen": --sentences GENERATED.jsonl beside the context -----------------------------------------------

CTX_SEN = {"context_dim": 4, "use_concepts": False, "use_sentence": True, "fusion": "sum", "embed_size": 6,
           "word_dim": 5, "generation": False}
GENERATED = {"img0": "a red circle", "img1": "a big blue square above", "img2": "small triangle"}


@pytest.fixture(scope="module")
def ctx_sen(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ctx_sen")
    context = np.random.default_rng(3).normal(size=(3, 4)).astype(np.float32)
    with FeaturesWriter(folder / "context.h5", {"global": "tencrop"}, dtype="float32") as writer:
        writer.add(list(GENERATED), **{"global": context})
    torch.manual_seed(4)
    model = build_model("sco", CTX_SEN, len(VOCAB))
    save_checkpoint(folder / "ctx_sen.pt", "sco", {**default_config("sco"), **CTX_SEN}, model.state_dict(),
                    vocab=VOCAB, schema=1)
    (folder / "generated.jsonl").write_text("".join(json.dumps({"image_id": i, "caption": c}) + "\n"
                                                    for i, c in GENERATED.items()))
    return folder, context, model.eval()


def test_sentence_model_encodes_the_context_with_each_image_s_generated_sentence(ctx_sen):
    folder, context, model = ctx_sen
    run("encode", str(folder / "context.h5"), "--sentences", str(folder / "generated.jsonl"), "--model",
        str(folder / "ctx_sen.pt"), "--batch-size", "2", "-o", str(folder / "img.h5"))
    with h5py.File(folder / "img.h5") as handle:
        assert decode_strings(handle["ids"][()]) == list(GENERATED)
        assert handle.attrs["sentences"] == str(folder / "generated.jsonl")
        emb = handle["emb"][()]
    vocab = Vocabulary(VOCAB)
    with torch.no_grad():
        expected = [model.encode_images(torch.from_numpy(context[[n]]), torch.zeros(1, 0),
                                        torch.tensor([vocab.encode(caption)]),
                                        torch.tensor([len(vocab.encode(caption))]))[0].numpy()
                    for n, caption in enumerate(GENERATED.values())]
    np.testing.assert_allclose(emb, np.stack(expected), rtol=1e-5, atol=1e-6)


def test_sentence_alone_model_encodes_each_image_s_generated_sentence_whatever_its_context(ctx_sen):
    folder, context, _ = ctx_sen
    torch.manual_seed(5)
    alone = {**CTX_SEN, "use_context": False}
    model = build_model("sco", alone, len(VOCAB)).eval()
    save_checkpoint(folder / "sen.pt", "sco", {**default_config("sco"), **alone}, model.state_dict(), vocab=VOCAB,
                    schema=1)
    run("encode", str(folder / "context.h5"), "--sentences", str(folder / "generated.jsonl"), "--model",
        str(folder / "sen.pt"), "-o", str(folder / "sen.h5"))
    vocab = Vocabulary(VOCAB)
    with h5py.File(folder / "sen.h5") as handle:
        assert decode_strings(handle["ids"][()]) == list(GENERATED)
        emb = handle["emb"][()]
    with torch.no_grad():
        expected = [model.encode_images(torch.zeros(1, 0), torch.zeros(1, 0), torch.tensor([vocab.encode(caption)]),
                                        torch.tensor([len(vocab.encode(caption))]))[0].numpy()
                    for caption in GENERATED.values()]
    np.testing.assert_allclose(emb, np.stack(expected), rtol=1e-5, atol=1e-6)


def test_sentence_model_without_sentences_is_refused(ctx_sen, capsys):
    folder, _, _ = ctx_sen
    err = fails(capsys, "encode", str(folder / "context.h5"), "--model", str(folder / "ctx_sen.pt"), "-o",
                str(folder / "none.h5"))
    assert "this SCO model (ctx + sen) represents each image by a generated sentence; give them with " \
           "--sentences GENERATED.jsonl" in err
    assert err.count("\n") == 1 and not (folder / "none.h5").exists()


def test_an_image_without_a_generated_sentence_is_refused_naming_it(ctx_sen, capsys):
    folder, _, _ = ctx_sen
    (folder / "short.jsonl").write_text(json.dumps({"image_id": "img1", "caption": "a red circle"}) + "\n")
    err = fails(capsys, "encode", str(folder / "context.h5"), "--sentences", str(folder / "short.jsonl"),
                "--model", str(folder / "ctx_sen.pt"), "-o", str(folder / "short.h5"))
    assert f"{folder / 'short.jsonl'}: has no generated sentence of image_id 'img0' named by " \
           f"{folder / 'context.h5'} (2 image(s) missing)" in err
    assert err.count("\n") == 1 and not (folder / "short.h5").exists()


def test_sentences_or_concepts_a_model_does_not_read_are_refused(world, ctx_sen, capsys):
    """A vse model given --sentences encoded the features alone, exit 0, as if the sentences had been used."""
    folder, features, captions, vse, _ = world
    generated = ctx_sen[0] / "generated.jsonl"
    err = fails(capsys, "encode", "--model", str(vse), str(features), "--sentences", str(generated), "-o",
                str(folder / "sen.h5"))
    assert f"--sentences: the vse model {vse} reads no generated sentences (only an SCO \"ctx + sen\" model, " \
           "trained with model.use_sentence, encoding features does); leave it out" in err
    err = fails(capsys, "encode", "--model", str(vse), str(captions), "--concepts", str(features), "-o",
                str(folder / "sen.h5"))
    assert f"--concepts: the vse model {vse} encoding captions reads no concept scores" in err
    context_only = {**CTX_SEN, "use_sentence": False}
    save_checkpoint(folder / "ctx.pt", "sco", {**default_config("sco"), **context_only},
                    build_model("sco", context_only, len(VOCAB)).state_dict(), vocab=VOCAB, schema=1)
    err = fails(capsys, "encode", str(ctx_sen[0] / "context.h5"), "--sentences", str(generated), "--model",
                str(folder / "ctx.pt"), "-o", str(folder / "sen.h5"))
    assert f"--sentences: the sco model {folder / 'ctx.pt'} reads no generated sentences" in err
    assert err.count("\n") == 1 and not (folder / "sen.h5").exists()
    with pytest.raises(VLToolsError, match="^sentences: the vse model .* leave it out$"):
        vltools.encode(features, vse, folder / "sen.h5", sentences=generated, device="cpu")
    assert not (folder / "sen.h5").exists()


@pytest.mark.slow      # torchrun: processes of their own, 10-30 s
def test_torchrun_processes_each_write_their_part_and_the_set_is_what_one_process_writes(world, tmp_path,
                                                                                         monkeypatch):
    """Issue 50: 8 images in blocks of 3 (process 0 takes blocks 0 and 1, process 1 block 2) and 18 captions in
    blocks of 4 (blocks 0, 1 and 2, 3, 4): each process writes its part; the folder is read as one embeddings
    file (match reads it), and merged it is the file one process writes but its creation time."""
    _, features, captions, vse, _ = world
    one, two = one_and_two_processes(tmp_path / "images", monkeypatch, "encode", "--model", vse, features,
                                     "--batch-size", "3", "--device", "cpu", "-o", "emb.h5")
    same_but_created(one / "emb.h5", merged(two / "emb.h5"))
    images = two
    one, two = one_and_two_processes(tmp_path / "captions", monkeypatch, "encode", "--model", vse, captions,
                                     "--batch-size", "4", "--device", "cpu", "-o", "emb.h5")
    same_but_created(one / "emb.h5", merged(two / "emb.h5"))
    with h5py.File(two / "emb.h5" / "part-00001-of-00002.h5") as handle:
        assert handle["emb"].shape[0] == 18 - 8 and handle.attrs["span"] == "8:18/18"
    single = read_embeddings(one / "emb.h5")
    parts = read_embeddings(two / "emb.h5")
    assert parts.ids == single.ids and parts.caption_image_ids == single.caption_image_ids
    assert np.array_equal(parts.vectors, single.vectors) and parts.attrs["ids_digest"] == single.attrs["ids_digest"]
    run("match", str(images / "emb.h5"), str(two / "emb.h5"), "-o", str(tmp_path / "sets.jsonl"))
    run("match", str(images / "emb.h5.merged"), str(merged(two / "emb.h5")), "-o", str(tmp_path / "files.jsonl"))
    assert (tmp_path / "sets.jsonl").read_bytes() == (tmp_path / "files.jsonl").read_bytes()
