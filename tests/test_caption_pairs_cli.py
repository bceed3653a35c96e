"""`vltools caption --pairs`: one description per pair in input order, splits, shards, resume, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from kill_helpers import killed_midway
from l2c_helpers import TINY_MODEL, make_world

import vltools.infer.pairs as pairs_step
from vltools.cli import cli, main
from vltools.data.l2c import FeatureMaps, read_pairs
from vltools.infer.loader import load_model
from vltools.infer.pairs import describe_pairs
from vltools.io.features import FeaturesReader, FeaturesWriter


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("l2c")
    world = make_world(folder)
    out = folder / "l2c.pt"
    args = ["--quiet", "train", "--model", "l2c", str(world["pairs"]), str(world["features"]), "-o", str(out),
            "--epochs", "1", "--batch-size", "4", "--lr", "1e-2", *TINY_MODEL]
    assert CliRunner().invoke(cli, args, catch_exceptions=False).exit_code == 0
    return world, out


def run(*args: str) -> list[dict]:
    result = CliRunner().invoke(cli, ["--quiet", "caption", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_one_description_per_pair_in_input_order_equal_to_the_library(trained):
    world, model = trained
    records = run("--pairs", str(world["pairs"]), "--model", str(model), str(world["features"]), "--beam", "2",
                  "--max-len", "6")
    pairs = read_pairs(world["pairs"], None)
    assert [r["pair_id"] for r in records] == pairs.pair_ids
    loaded = load_model(model, "l2c")
    direct = describe_pairs(loaded.model, FeatureMaps(world["features"]), pairs, loaded.vocab, beam_size=2,
                            max_len=6, batch_size=5)
    assert [r["caption"] for r in records] == direct
    assert all(len(r["caption"].split()) <= 6 for r in records)


def test_split_shards_and_resume(trained, tmp_path, monkeypatch):
    world, model = trained
    base = ["--pairs", str(world["pairs"]), "--model", str(model), str(world["features"]), "--max-len", "5"]
    val = run(*base, "--split", "val")
    assert [r["pair_id"] for r in val] == ["p3", "p7", "p11"]
    shards = [run(*base, "--split", "val", "--shard", f"{i}/2", "--batch-size", "1") for i in range(2)]
    assert [r["pair_id"] for r in shards[0]] == ["p3"] and shards[1] == val[1:]
    out, partial = tmp_path / "d.jsonl", tmp_path / "d.jsonl.partial"
    real = pairs_step.describe_batches

    def killed_after_one_batch(*args, **kwargs):
        yield next(real(*args, **kwargs))
        raise RuntimeError("killed by the test")

    monkeypatch.setattr(pairs_step, "describe_batches", killed_after_one_batch)
    with pytest.raises(RuntimeError, match="killed by the test"):
        run(*base, "--split", "val", "-o", str(out), "--batch-size", "1")
    monkeypatch.undo()
    assert sorted(p.name for p in partial.iterdir()) == ["chunk-000000.jsonl", "state.json"]
    result = CliRunner().invoke(cli, ["caption", *base, "--split", "val", "-o", str(out), "--resume", "--beam", "2"])
    assert result.exit_code == 1 and "the interrupted run used --beam 3, this run 2" in str(result.exception)
    run(*base, "--split", "val", "-o", str(out), "--resume")
    assert [json.loads(line) for line in out.read_text().splitlines()] == val and not partial.exists()


def test_errors(trained, tmp_path, capsys):
    world, model = trained
    for args, message in (
        (["--pairs", str(world["pairs"]), "--model", str(model), str(world["aux_features"])], "image 'p0a' is not in"),
        (["--pairs", str(world["pairs"]), "--model", str(world["pairs"]), str(world["features"])], "checkpoint"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["caption", *args])
        assert exit_info.value.code == 1
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    result = CliRunner().invoke(cli, ["caption", "--pairs", str(world["pairs"]), "--model", str(model),
                                      str(world["features"]), "--sample"])
    assert result.exit_code == 2


def test_baseline_stage_describes_pairs_in_input_order(trained):
    world, _ = trained
    pairs = read_pairs(world["pairs"], "train")
    texts = [text for _, text in pairs.items()]
    frequent = run_stage("baseline", "most-frequent", str(world["pairs"]), "--split", "val")
    assert [r["pair_id"] for r in frequent] == ["p3", "p7", "p11"]
    assert {r["caption"] for r in frequent} == {max(texts, key=texts.count)}
    sampled = run_stage("baseline", "text-only", str(world["pairs"]), "--seed", "3")
    assert len(sampled) == 12 and all(r["caption"] in texts for r in sampled)
    assert sampled == run_stage("baseline", "text-only", str(world["pairs"]), "--seed", "3")


def run_stage(*args: str) -> list[dict]:
    result = CliRunner().invoke(cli, ["--quiet", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_a_nan_feature_map_is_refused_not_described(trained, tmp_path, capsys):
    """A NaN map once gave exit 0 and "the" for its pair; now one line naming the image and no output."""
    world, model = trained
    bad = tmp_path / "nan.h5"
    shutil.copy(world["features"], bad)
    with h5py.File(bad, "a") as handle:
        handle["featmap"][handle["ids"].asstr()[:].tolist().index("p3a"), 2] = np.nan
    out = tmp_path / "d.jsonl"
    with pytest.raises(SystemExit) as exit_info:
        main(["--quiet", "caption", "--pairs", str(world["pairs"]), "--model", str(model), str(bad), "-o", str(out)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert "nan.h5: image id 'p3a': /featmap holds NaN or infinite values" in err
    assert not out.exists() and not list(tmp_path.glob("d.jsonl*"))


def test_feature_maps_of_another_width_than_the_checkpoint_are_refused(trained, tmp_path, capsys):
    world, model = trained
    with FeaturesReader(world["features"]) as reader:
        ids = list(reader.ids)
        arrays = reader.read(ids, ["featmap", "mask"])
    wide = tmp_path / "wide.h5"        # twice the channels of the training maps (l2c_helpers.DIM = 8)
    with FeaturesWriter(wide, {"stage": "segment-pool"}, dtype="float32") as writer:
        writer.add(ids, featmap=np.concatenate([arrays["featmap"]] * 2, axis=1), mask=arrays["mask"])
    output = tmp_path / "out.jsonl"
    with pytest.raises(SystemExit) as exit_info:
        main(["--quiet", "caption", "--pairs", str(world["pairs"]), "--model", str(model), str(wide), "-o",
              str(output)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.count("\n") == 1, err
    assert f"{wide}: feature maps have 16 channels but {model} was trained on 8" in err
    assert not output.exists()


def test_kill_9_part_way_then_resume_equals_an_uninterrupted_run(trained, tmp_path):
    world, model = trained
    originals = [json.loads(line) for line in world["pairs"].read_text().splitlines()]
    pairs = tmp_path / "many.jsonl"        # 48 pairs over the trained world's images
    pairs.write_text("".join(json.dumps({**originals[n % len(originals)], "pair_id": f"q{n}"}) + "\n"
                             for n in range(48)), encoding="utf-8")
    args = ["caption", "--pairs", pairs, "--model", model, world["features"], "--batch-size", "1"]
    output, partial = tmp_path / "d.jsonl", tmp_path / "d.jsonl.partial"
    killed_midway("vltools.io.checkpoint:Checkpoint.commit", 4, *args, "--checkpoint-seconds", "0", "-o", output)
    done = len(_kept(partial))
    assert not output.exists() and 4 <= done < 48
    run(*map(str, args[1:]), "-o", str(output), "--resume")
    assert not partial.exists()
    resumed = [json.loads(line) for line in output.read_text().splitlines()]
    assert resumed == run(*map(str, args[1:])) and len(resumed) == 48


def test_all_descriptions_empty_is_one_line_exit_1_and_writes_nothing(trained, tmp_path, capsys, monkeypatch):
    world, model = trained
    real = pairs_step.describe_batches

    def mute(*args, **kwargs):
        for texts, logprob in real(*args, **kwargs):
            yield ["" for _ in texts], logprob

    monkeypatch.setattr(pairs_step, "describe_batches", mute)
    out = tmp_path / "d.jsonl"
    with pytest.raises(SystemExit) as exc:
        main(["--quiet", "caption", "--pairs", str(world["pairs"]), "--model", str(model), str(world["features"]),
              "--split", "val", "-o", str(out)])
    assert exc.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"vltools: error: {model}: all 3 pair descriptions it wrote are empty (decoding ended at the first word), so "
        "nothing was written; check that the checkpoint is trained and that the features come from the extractor it "
        "was trained on"]
    assert list(tmp_path.iterdir()) == []


def _kept(partial: Path) -> list[str]:
    """The ids of the descriptions in the committed chunks of checkpoint folder `partial`."""
    return [json.loads(line)["id"] for chunk in sorted(partial.glob("chunk-*.jsonl"))
            for line in chunk.read_text(encoding="utf-8").splitlines()]
