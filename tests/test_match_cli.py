"""`vltools match`: rankings agree with the sims matrix, sims are what the model computes and what score reads."""

from __future__ import annotations

import json
import logging
import os
import sys

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from kill_helpers import interrupted_then_resumed
from matching_helpers import VOCAB, fails, make_world, save_overflowing, save_tiny
from pipeline_fixtures import merged, one_and_two_processes, run_process, same_but_created, torchrun

import vltools
import vltools.infer.match as match_step
from vltools.cli import cli, main
from vltools.io.checkpoints import load_checkpoint
from vltools.io.features import FeaturesReader, FeaturesWriter
from vltools.io.progress import log
from vltools.io.records import read_records, write_records
from vltools.io.sims import read_sims
from vltools.models import model_from_checkpoint
from vltools.text.captions import pad_tokens
from vltools.text.vocab import Vocabulary

LONG_CAPTION_MARGIN_MB = 64  # extra peak memory allowed for one 5000-word caption (cut to 100 words)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("match")
    features, captions = make_world(folder, n_images=6, per_image=3)
    models = {name: save_tiny(folder / f"{name}.pt", name, seed) for seed, name in enumerate(["sgr", "saf", "vse"])}
    return folder, features, captions, models


def run(*args: str) -> str:
    """Standard output of a successful run (the world's captions hold a word outside the vocabulary, 'unseen', often
    enough for match's warning on standard error)."""
    result = CliRunner().invoke(cli, ["--quiet", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def direct_sims(checkpoint, features, captions) -> tuple[np.ndarray, list[str], list[str]]:
    """Independent reference: the test split in file order, images by first mention, one unblocked call."""
    records = [r for r in read_records(captions, "captions") if r["split"] == "test"]
    image_ids = list(dict.fromkeys(r["image_id"] for r in records))
    model = model_from_checkpoint(load_checkpoint(checkpoint))
    tokens, lengths = pad_tokens([Vocabulary(VOCAB).encode(r["caption"]) for r in records])
    with FeaturesReader(features) as reader:
        arrays = reader.read(image_ids, ["regions", "num_regions"])
    with torch.inference_mode():
        img = model.encode_images(torch.from_numpy(arrays["regions"]), torch.from_numpy(arrays["num_regions"]).long())
        sims = model.similarity(img, model.encode_captions(tokens, lengths), lengths).numpy()
    return sims, image_ids, [r["caption_id"] for r in records]


def test_rankings_and_sims(world):
    folder, features, captions, models = world
    sims_path = folder / "sims.h5"
    lines = run("match", "--model", str(models["sgr"]), str(features), str(captions), "--top-k", "4",
                "--sims", str(sims_path), "--batch-images", "4", "--batch-captions", "5").splitlines()
    expected, image_ids, caption_ids = direct_sims(models["sgr"], features, captions)
    written = read_sims(sims_path)
    assert written.image_ids == image_ids and written.caption_ids == caption_ids
    assert written.caption_image_ids == [c.split("#")[0] for c in caption_ids]
    np.testing.assert_allclose(written.sims, expected, rtol=1e-5, atol=1e-6)
    records = [json.loads(line) for line in lines]
    assert [r["query"] for r in records] == image_ids + caption_ids
    assert [r["direction"] for r in records] == ["i2t"] * len(image_ids) + ["t2i"] * len(caption_ids)
    for row, record in enumerate(records[:len(image_ids)]):
        assert record["ids"] == [caption_ids[j] for j in np.argsort(-expected[row])[:4]]
        np.testing.assert_allclose(record["scores"], np.sort(expected[row])[::-1][:4], rtol=1e-5)
    for column, record in enumerate(records[len(image_ids):]):
        assert record["ids"] == [image_ids[i] for i in np.argsort(-expected[:, column])[:4]]
    score = json.loads(run("score", "retrieval", str(sims_path)))
    assert score["n_images"] == 6 and score["n_captions"] == 18


def test_ensemble_is_mean_of_members(world):
    folder, features, captions, models = world
    run("match", "--model", str(models["sgr"]), "--model", str(models["saf"]), str(features), str(captions),
        "--sims", str(folder / "both.h5"), "-o", str(folder / "both.jsonl"))
    sgr, _, _ = direct_sims(models["sgr"], features, captions)
    saf, _, _ = direct_sims(models["saf"], features, captions)
    np.testing.assert_allclose(read_sims(folder / "both.h5").sims, (sgr + saf) / 2, rtol=1e-5, atol=1e-6)
    assert len(read_records(folder / "both.jsonl", "rankings")) == 6 + 18


def test_two_saved_matrices_rank_as_the_ensemble_without_the_models(world, capsys):
    folder, features, captions, models = world
    for name in ("sgr", "saf"):
        run("match", "--model", str(models[name]), str(features), str(captions), "--sims", str(folder / f"{name}.h5"),
            "-o", str(folder / f"{name}.jsonl"))
    run("match", "--model", str(models["sgr"]), "--model", str(models["saf"]), str(features), str(captions),
        "--top-k", "4", "-o", str(folder / "models.jsonl"))
    from_sims = run("match", str(folder / "sgr.h5"), str(folder / "saf.h5"), "--top-k", "4",
                    "--sims", str(folder / "mean.h5")).splitlines()
    from_models = (folder / "models.jsonl").read_text().splitlines()
    assert len(from_sims) == len(from_models) == 6 + 18
    for a, b in zip(from_sims, from_models, strict=True):
        a, b = json.loads(a), json.loads(b)
        assert (a["query"], a["direction"], a["ids"]) == (b["query"], b["direction"], b["ids"])
        np.testing.assert_allclose(a["scores"], b["scores"], rtol=1e-5, atol=1e-6)
    mean = (read_sims(folder / "sgr.h5").sims + read_sims(folder / "saf.h5").sims) / 2
    np.testing.assert_allclose(read_sims(folder / "mean.h5").sims, mean, rtol=1e-6)
    assert "expected a second similarity matrix" in fails(capsys, "match", str(folder / "sgr.h5"), str(captions))


def test_rerank_everything_equals_full_match(world):
    folder, features, captions, models = world
    full = run("match", "--model", str(models["sgr"]), str(features), str(captions), "--top-k", "3")
    reranked = run("match", "--model", str(models["sgr"]), str(features), str(captions), "--top-k", "3",
                   "--rerank", "18", "--first-stage", str(models["vse"]))
    for a, b in zip(full.splitlines(), reranked.splitlines(), strict=True):
        a, b = json.loads(a), json.loads(b)
        assert (a["query"], a["direction"], a["ids"]) == (b["query"], b["direction"], b["ids"])
        np.testing.assert_allclose(a["scores"], b["scores"], rtol=1e-5)


def test_bad_inputs_exit_1_naming_the_problem(world, capsys):
    folder, features, captions, models = world
    records = read_records(captions, "captions")
    write_records(folder / "missing.jsonl", [*records, {"image_id": "ghost", "caption": "a red circle",
                                                        "split": "test", "caption_id": "ghost#0"}])
    err = fails(capsys, "match", "--model", str(models["sgr"]), str(features), str(folder / "missing.jsonl"))
    assert "'ghost'" in err
    err = fails(capsys, "match", "--model", str(models["sgr"]), str(features), str(captions), "--rerank", "3")
    assert "--first-stage" in err
    other = save_tiny(folder / "other.pt", "saf", 5, vocab=[*VOCAB, "extra"])
    err = fails(capsys, "match", "--model", str(models["sgr"]), "--model", str(other), str(features), str(captions))
    assert "vocabulary differs" in err
    err = fails(capsys, "match", "--model", str(models["sgr"]), str(features), str(captions), "--split", "val")
    assert "'val'" in err


PEAK_RSS = """
import resource, sys
from vltools.cli import main

def peak(argv):
    try:
        main(argv)
    except SystemExit as exc:
        assert not exc.code, argv
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024

print(*(peak(argv.split("|")) for argv in sys.argv[1:]))
"""


def test_a_5000_word_caption_stays_within_the_memory_bound(world, tmp_path):
    """Peak RSS of match and train with one 5000-word caption exceeds that of a run without it by under the
    documented margin (the caption is cut to MAX_CAPTION_TOKENS words; uncut, SGR's word graph needs GBs)."""
    folder, features, captions, models = world
    records = read_records(captions, "captions")
    long = [*records, {"image_id": "img1", "caption": " ".join(["red"] * 5000), "split": "test", "caption_id": "x"}]
    train = [{**r, "split": "train" if i % 3 else "val"} for i, r in enumerate(long)]
    write_records(tmp_path / "long.jsonl", long)
    write_records(tmp_path / "short_train.jsonl", train[:-1])
    write_records(tmp_path / "long_train.jsonl", [*train[:-1], {**train[-1], "split": "train"}])
    match = f"-q|match|{features}|{{}}|--model|{models['sgr']}|-o|{tmp_path}/{{}}.rankings.jsonl"
    fit = (f"-q|train|--model|sgr|{features}|{{}}|-o|{tmp_path}/{{}}.pt|--epochs|1|--batch-size|8|--device|cpu|"
           f"--set|model.embed_size=24|--set|model.word_dim=12|--set|model.sim_dim=8|--set|model.sgr_step=2")
    runs = [match.format(captions, "short"), fit.format(tmp_path / "short_train.jsonl", "short"),
            match.format(tmp_path / "long.jsonl", "long"), fit.format(tmp_path / "long_train.jsonl", "long")]
    script = tmp_path / "peak.py"
    script.write_text(PEAK_RSS)
    result = run_process([sys.executable, str(script), *runs], capture_output=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr.decode()
    _, baseline, _, with_long = map(int, result.stdout.split())
    assert with_long - baseline < LONG_CAPTION_MARGIN_MB, result.stdout
    assert len(read_records(tmp_path / "long.rankings.jsonl", "rankings")) == 6 + 19  # one per image and caption


def test_captions_without_splits_go_through_match_score_and_report(world, tmp_path):
    """The user's own captions (no split field) are matched whole; score reads match's rankings of a file with
    splits (the test split by default) with the README's literal command, no --split needed."""
    folder, features, captions, models = world
    bare = tmp_path / "bare.jsonl"
    write_records(bare, [{k: v for k, v in r.items() if k != "split"} for r in read_records(captions, "captions")
                         if r["split"] == "test"])
    ranks = tmp_path / "ranks.jsonl"
    run("match", "--model", str(models["vse"]), str(features), str(bare), "-o", str(ranks))
    assert sum(json.loads(line)["direction"] == "t2i" for line in ranks.read_text().splitlines()) == 18
    scored = json.loads(run("score", "retrieval", str(ranks), "--captions", str(bare)).splitlines()[0])
    assert scored["n_images"] == 6 and scored["n_captions"] == 18
    run("report", str(tmp_path / "site"), "--rankings", str(ranks), "--captions", str(bare), "--sample", "0")
    assert (tmp_path / "site" / "index.html").is_file()
    split_ranks = tmp_path / "split_ranks.jsonl"
    run("match", "--model", str(models["vse"]), str(features), str(captions), "-o", str(split_ranks))
    assert json.loads(run("score", "retrieval", str(split_ranks), "--captions", str(captions)).splitlines()[0]) == \
        scored


def test_a_split_with_no_captions_names_match_own_option(world, capsys):
    folder, features, captions, models = world
    err = fails(capsys, "match", "--model", str(models["vse"]), str(features), str(captions), "--split", "val")
    assert err.strip().endswith("no captions in split 'val' (splits present: test, train; choose one with --split)")
    assert "--train-split" not in err


def test_features_with_another_region_count_fail_in_one_line_naming_the_options_before_any_work(world, tmp_path,
                                                                                                capsys, monkeypatch):
    """The tester's grid features (196 regions) met an SGR built for 36 after 1 min 50 s of work; the header says
    so before any caption is read or encoded and any pair scored."""
    import vltools.infer.match as match_module
    from vltools.infer.loader import LoadedModel

    folder, _, captions, models = world
    attrs = {"backbone": "resnet18", "weights": "imagenet", "regions": "grid", "image_size": 96, "stride": 32}
    records = read_records(captions, "captions")
    image_ids = list(dict.fromkeys(r["image_id"] for r in records))
    features = tmp_path / "grid.h5"
    with FeaturesWriter(features, attrs, dtype="float32") as writer:   # 3 x 3 cells; the tiny SGR reads 4 regions
        writer.add(image_ids, regions=np.ones((len(image_ids), 9, 16), np.float32))

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the features were checked")

    for name in ("read_split", "similarity_columns", "rerank"):
        monkeypatch.setattr(match_module, name, no_work)
    monkeypatch.setattr(LoadedModel, "tokenize", no_work)
    out = tmp_path / "ranks.jsonl"
    err = fails(capsys, "match", "--model", str(models["sgr"]), str(features), str(captions), "-o", str(out))
    assert err.splitlines() == [
        f"vltools: error: {features}: the images have 9 regions each (a 3 x 3 grid of --image-size 96) but "
        f"{models['sgr']} was built for num_regions=4; extract them again with --image-size 64 (a 2 x 2 grid at "
        "stride 32) or --regions bottom-up --num-regions 4, or train a model on these features"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.h5"]


@pytest.mark.parametrize("caption, info, warning", [
    ("a red circle left of a blue square", "0.0% (0 of 48)", None),
    ("a cat and a rocket", "60.0% (18 of 30)",
     "60% of the caption words are outside the vocabulary of sgr.pt (e.g. 'cat', 'and', 'rocket'): it reads each as "
     "<unk>, so its scores of these captions probably mean little; use a model whose vocabulary holds words like "
     "these (its training log says how much of its own captions it kept)"),
])
def test_the_share_of_caption_words_outside_the_vocabulary_is_said_and_warned_above_5_percent(
        world, tmp_path, monkeypatch, caption, info, warning):
    """Captions about cats and rockets matched against a model of shapes once said only `matched 6 images x 6
    captions`."""
    folder, features, _, models = world
    captions = tmp_path / "own.jsonl"
    write_records(captions, [{"image_id": f"img{i}", "caption": caption} for i in range(6)])
    said = []
    for level in (logging.INFO, logging.WARNING):
        monkeypatch.setattr(log, logging.getLevelName(level).lower(),
                            lambda message, *args, level=level: said.append((level, message % args)))
    main(["match", "--model", str(models["sgr"]), str(features), str(captions), "-o", str(tmp_path / "r.jsonl")])
    assert [line for line in said if "vocabulary" in line[1]] == [
        (logging.INFO, f"caption words outside the vocabulary of sgr.pt: {info}"),
        *([(logging.WARNING, warning)] if warning else [])]
    assert said[-1] == (logging.INFO, "matched 6 images x 6 captions with sgr")


@pytest.mark.parametrize("names, flag", [(["sgr"], "Flat"), (["saf"], "IVF1024,Flat"), (["sgr", "saf"], "Flat")])
def test_an_index_with_a_cross_attention_model_is_refused_before_any_work(world, tmp_path, capsys, names, flag):
    """`match --index Flat` with an SGR model once exited 0 with output identical to the run without it."""
    folder, features, _, models = world
    args = [arg for name in names for arg in ("--model", str(models[name]))]
    output = tmp_path / "r.jsonl"
    unread = tmp_path / "unread.jsonl"      # JSON lines by its first bytes, malformed after them
    unread.write_text('{"image_id": \n')
    err = fails(capsys, "match", *args, str(features), str(unread), "--index", flag, "-o",
                str(output))          # the captions file is never parsed: the refusal comes first
    assert err.strip().splitlines() == [
        f"vltools: error: --index {flag}: {models[names[0]]} holds a cross-attention model ({names[0]}), whose "
        "similarities are not dot products of separate image and caption embeddings, so no index can search them; "
        f"add --rerank K --first-stage VSE.pt (the index searches the separable first stage, {names[0]} rescores its "
        "K candidates per query) or drop --index"]
    assert list(tmp_path.iterdir()) == [unread]


def test_an_index_that_would_go_unused_is_refused_for_separable_models_and_scored_matrices(world, tmp_path, capsys):
    folder, features, captions, models = world
    err = fails(capsys, "match", "--model", str(models["vse"]), str(features), str(captions), "--index", "Flat")
    assert "--index Flat: without --rerank every pair is scored exactly and the index would go unused" in err
    assert "--rerank K --first-stage CKPT" in err and "`vltools encode`" in err
    run("match", "--model", str(models["vse"]), str(features), str(captions), "--sims", str(tmp_path / "s.h5"),
        "-o", str(tmp_path / "r.jsonl"))
    err = fails(capsys, "match", str(tmp_path / "s.h5"), str(tmp_path / "s.h5"), "--index", "Flat")
    assert "--index Flat: the similarity matrices are already scored" in err


def test_a_saved_index_of_the_first_stage_reranks_as_the_full_match(world, tmp_path, capsys):
    """The first stage searches the saved index of its caption embeddings instead of indexing them again; with K
    covering every caption the reranked lists are the full match's. An index of another model is refused."""
    pytest.importorskip("faiss")
    folder, features, captions, models = world
    run("encode", str(captions), "--model", str(models["vse"]), "-o", str(tmp_path / "caps.h5"))
    run("index", str(tmp_path / "caps.h5"), "-o", str(tmp_path / "caps.index.h5"))
    full = run("match", "--model", str(models["sgr"]), str(features), str(captions), "--top-k", "3")
    index = str(tmp_path / "caps.index.h5")
    reranked = run("match", "--model", str(models["sgr"]), str(features), str(captions), "--top-k", "3",
                   "--rerank", "18", "--first-stage", str(models["vse"]), "--index-file", index)
    for a, b in zip(full.splitlines(), reranked.splitlines(), strict=True):
        a, b = json.loads(a), json.loads(b)
        assert (a["query"], a["direction"], a["ids"]) == (b["query"], b["direction"], b["ids"])
    other = save_tiny(tmp_path / "other_vse.pt", "vse", 7)
    err = fails(capsys, "match", "--model", str(models["sgr"]), str(features), str(captions), "--rerank", "18",
                "--first-stage", str(other), "--index-file", str(tmp_path / "caps.index.h5"))
    assert f"--first-stage {other}: encoded by another checkpoint (" in err and len(err.strip().splitlines()) == 1
    err = fails(capsys, "match", "--model", str(models["sgr"]), str(features), str(captions),
                "--index-file", str(tmp_path / "caps.index.h5"))
    assert "region features are scored by --model pair by pair" in err


def test_a_saved_index_over_more_images_than_the_split_searches_the_split_alone(world, tmp_path, capsys):
    """The index holds all 8 images of the features, the test split names 6: with K = 6 each caption's candidates
    are the 6 matched images, so its reranked list is the full match's, through the command and the API. An index
    type that cannot search a subset is refused in one line before anything is written."""
    pytest.importorskip("faiss")
    folder, features, captions, models = world
    run("encode", "--model", str(models["vse"]), str(features), "-o", str(tmp_path / "imgs.h5"))
    run("index", str(tmp_path / "imgs.h5"), "-o", str(tmp_path / "imgs.index.h5"))
    full = [json.loads(line) for line in run("match", "--model", str(models["sgr"]), str(features), str(captions),
                                             "--top-k", "6").splitlines()]
    expected = [(r["query"], r["ids"]) for r in full if r["direction"] == "t2i"]
    assert len(expected) == 18 and all(len(ids) == 6 for _, ids in expected)
    rerank = ("--rerank", "6", "--first-stage", str(models["vse"]), "--top-k", "6")
    reranked = [json.loads(line) for line in run("match", "--model", str(models["sgr"]), str(features), str(captions),
                                                 *rerank, "--index-file", str(tmp_path / "imgs.index.h5")).splitlines()]
    assert [(r["query"], r["ids"]) for r in reranked if r["direction"] == "t2i"] == expected
    api = vltools.match(features, captions, models["sgr"], rerank_k=6, first_stage=models["vse"], top_k=6,
                        index_file=tmp_path / "imgs.index.h5", device="cpu")
    assert [(r["query"], r["ids"]) for r in api.rankings() if r["direction"] == "t2i"] == expected
    run("index", str(tmp_path / "imgs.h5"), "--factory", "Flat,RFlat", "-o", str(tmp_path / "refine.index.h5"))
    capsys.readouterr()     # the warnings of the runs above
    err = fails(capsys, "match", "--model", str(models["sgr"]), str(features), str(captions), *rerank,
                "--index-file", str(tmp_path / "refine.index.h5"), "-o", str(tmp_path / "r.jsonl"))
    assert err.startswith(f"vltools: error: {tmp_path / 'refine.index.h5'}: its Flat,RFlat index cannot search only "
                          "the 6 of its 8 rows that are matched (") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.slow      # torchrun: processes of their own, 10-30 s
def test_torchrun_processes_score_their_parts_of_the_sims_which_rank_as_one_process_does(world, tmp_path,
                                                                                        monkeypatch):
    """Issue 50: 18 captions in blocks of 4 with the SGR + SAF ensemble; process 0 scores blocks 0-1 (8 captions)
    against every image, process 1 blocks 2-4, each into its part of --sims FOLDER; `match FOLDER` ranks them as one
    process ranks its matrix, and merged they are that matrix, byte for byte but the creation time."""
    _, features, captions, models = world
    args = ["match", "--model", models["sgr"], "--model", models["saf"], features, captions, "--block-images", "2",
            "--block-captions", "4", "--device", "cpu", "--sims", "sims.h5"]
    one, two = one_and_two_processes(tmp_path, monkeypatch, *args)
    with h5py.File(two / "sims.h5" / "part-00000-of-00002.h5") as handle:
        assert handle["sims"].shape == (6, 8) and handle.attrs["span"] == "0:8/18"
    same_but_created(one / "sims.h5", merged(two / "sims.h5"))
    run("match", str(one / "sims.h5"), "-o", str(one / "rankings.jsonl"))
    run("match", str(two / "sims.h5"), "-o", str(two / "rankings.jsonl"))
    assert len(read_records(two / "rankings.jsonl", "rankings")) == 6 + 18
    assert (one / "rankings.jsonl").read_bytes() == (two / "rankings.jsonl").read_bytes()
    done = torchrun(*args[:-2], "-o", "r.jsonl", cwd=tmp_path)
    assert done.returncode != 0 and "under torchrun each process scores its part of the captions into --sims " \
        "FOLDER (rankings need every caption)" in done.stderr


def test_an_interrupted_plain_match_continues_with_resume(world, tmp_path, capsys, monkeypatch):
    """Issue 41: a match with a cross-attention model (hours on a CPU for Flickr30K) kept nothing when stopped; each
    finished caption block is now committed as it comes, and --resume keeps them, says how many, and writes the
    rankings and the sims an uninterrupted run writes."""
    _, features, captions, models = world
    args = ["match", "--model", str(models["sgr"]), "--model", str(models["saf"]), str(features), str(captions),
            "--block-captions", "4", "--block-images", "4", "--top-k", "3"]
    run(*args, "-o", str(tmp_path / "whole.jsonl"), "--sims", str(tmp_path / "whole.h5"))
    out = tmp_path / "out.jsonl"
    err = interrupted_then_resumed(monkeypatch, capsys, match_step, "similarity_columns", 2, *args, "-o", out,
                                   "--sims", tmp_path / "out.h5")
    assert f"match: resuming {out}: 8 of 18 captions kept from an interrupted run\n" in err
    assert not (tmp_path / "out.jsonl.partial").exists()
    assert out.read_bytes() == (tmp_path / "whole.jsonl").read_bytes()
    whole, resumed = read_sims(tmp_path / "whole.h5"), read_sims(tmp_path / "out.h5")
    assert (resumed.image_ids, resumed.caption_ids) == (whole.image_ids, whole.caption_ids)
    np.testing.assert_array_equal(resumed.sims, whole.sims)


def test_a_resume_with_another_model_or_without_kept_work_is_refused_or_said(world, tmp_path, capsys, monkeypatch):
    """The captions kept by an interrupted SGR match are not SAF's: a resume with SAF is refused in one line naming
    the option, and the kept work stays. A resume with nothing kept says so; a short match refuses --resume."""
    _, features, captions, models = world
    out = tmp_path / "out.jsonl"
    args = [str(features), str(captions), "--block-captions", "4", "-o", str(out)]
    real = match_step.similarity_columns

    def stopped(*given, **options):
        yield next(real(*given, **options))
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(match_step, "similarity_columns", stopped)
        with pytest.raises(SystemExit) as stop:
            main(["-q", "match", "--model", str(models["sgr"]), *args])
    assert stop.value.code == 130
    capsys.readouterr()
    [refusal] = [line for line in fails(capsys, "match", "--model", str(models["saf"]), *args, "--resume").splitlines()
                 if not line.endswith("words like these (its training log says how much of its own captions it kept)")]
    assert refusal.startswith(f"vltools: error: {out}.partial: the interrupted run used models ")
    assert f"this run '{models['saf']} (" in refusal and "resume with the same options" in refusal
    assert sorted(p.name for p in (tmp_path / "out.jsonl.partial").iterdir()) == ["chunk-000000.h5", "state.json"]
    assert not out.exists()
    main(["match", "--model", str(models["sgr"]), str(features), str(captions), "-o", str(tmp_path / "fresh.jsonl"),
          "--resume"])
    assert f"match: nothing to resume for {tmp_path / 'fresh.jsonl'}; starting from the beginning\n" in \
        capsys.readouterr().err
    err = fails(capsys, "match", "--model", str(models["sgr"]), *args, "--rerank", "3", "--first-stage",
                str(models["vse"]), "--resume")
    assert err.splitlines() == ["vltools: error: --resume continues a match of region features by --model that "
                                "scores every pair; --rerank K scores only its candidates, keeps nothing to resume "
                                "and starts over anyway: drop --resume"]
    err = fails(capsys, "match", "--model", str(models["sgr"]), str(features), str(captions), "--resume")
    assert err.startswith("vltools: error: --resume needs -o PATH")


@pytest.mark.parametrize("to_file", [False, True])
def test_non_finite_similarities_are_the_api_s_one_line_in_the_command_s_words(world, tmp_path, capsys, to_file):
    """Issue 48 item 3: to standard output the command wrote NaN rankings with status 0; to a file it named an
    internal dataset (/rows). Both now refuse with the API's line, naming the caption id and the precisions."""
    _, features, captions, _ = world
    model = save_overflowing(tmp_path / "overflowing.pt", "saf")
    out = ["-o", str(tmp_path / "r.jsonl")] if to_file else []
    err = fails(capsys, "match", "--model", str(model), str(features), str(captions), "--precision", "fp16",
                "--device", "cpu", *out)
    assert err.splitlines()[-1] == ("vltools: error: caption id 'img0#0': the model gave NaN or infinite "
                                    "similarities under --precision fp16; run with --precision fp32 (or bf16, which "
                                    "keeps float32's range)")
    assert not (tmp_path / "r.jsonl").exists() and not (tmp_path / "r.jsonl.partial").exists()
