"""`vltools train` from the command line: bad input exits 1 with one line, and 2 gloo processes under
torchrun train exactly like 1 process that accumulates the same 2 shares of each global batch."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from pipeline_fixtures import torchrun
from tiny_matching import TINY, TINY_SGR, make_world

from vltools.cli import cli, main
from vltools.io.checkpoints import load_checkpoint
from vltools.io.kinds import HDF5_SIGNATURE
from vltools.io.records import write_records


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("world"))


def exit_with(argv, capsys):
    """Run the real entry point in-process; (exit status, stderr)."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    return stop.value.code, capsys.readouterr().err


def test_caption_of_an_absent_image_exits_1_naming_it(world, tmp_path, capsys):
    features, _ = world
    captions = tmp_path / "caps.jsonl"
    write_records(captions, [{"image_id": "img000", "caption": "a red cube", "split": "train"},
                             {"image_id": "img999", "caption": "a blue ball", "split": "train"},
                             {"image_id": "img001", "caption": "a red cube", "split": "val"}])
    code, err = exit_with(["train", "--model", "vse", str(features), str(captions), "-o", str(tmp_path / "m.pt")],
                          capsys)
    assert code == 1
    assert err.strip().splitlines() == [f"vltools: error: {captions}: image_id 'img999' is not in {features} "
                                        "(1 image(s) missing); extract its features or remove its captions"]
    assert list(tmp_path.iterdir()) == [captions]


def test_empty_split_is_a_clear_error(world, tmp_path, capsys):
    features, captions = world
    code, err = exit_with(["train", "--model", "sgr", str(features), str(captions), "-o", str(tmp_path / "m.pt"),
                           "--val-split", "dev"], capsys)
    assert code == 1
    assert "no captions in split 'dev' (splits present: train, val; choose one with --val-split)" in err


@pytest.mark.parametrize("extra, message", [
    (["--set", "model.embed_sise=8"], "unknown config key 'model.embed_sise'; did you mean 'model.embed_size'?"),
    (["--set", "model.img_dim=99"], "the features give img_dim=16 but the config says model.img_dim=99"),
    (["--set", "train.batch_size=0"], "train.batch_size must be in [1, inf), not 0"),
    (["--set", "train.lr=nan"], "train.lr must be a finite number, not nan"),
    (["--set", "train.seed=-5"], "train.seed must be in [0, 4294967295], not -5"),
    (["--set", "model.dropout=5"], "model.dropout must be in [0.0, 1.0), not 5.0"),
    (["--set", "train.epochs=-1", "--epochs", "2"], "--set train.epochs=-1: train.epochs must be in [1, inf), not -1"),
])
def test_bad_settings_exit_1(world, tmp_path, capsys, extra, message):
    features, captions = world
    code, err = exit_with(["train", "--model", "vse", str(features), str(captions), "-o", str(tmp_path / "m.pt"),
                           *extra], capsys)
    assert code == 1 and message in err, err


@pytest.mark.parametrize("extra", [["--batch-size", "0"], ["--lr", "-1"], ["--epochs", "0"], ["--lr", "nan"]])
def test_out_of_range_options_are_usage_errors(world, tmp_path, capsys, extra):
    features, captions = world
    code, err = exit_with(["train", "--model", "sgr", str(features), str(captions), "-o", str(tmp_path / "m.pt"),
                           *extra], capsys)
    assert code == 2 and f"Invalid value for '{extra[0]}'" in err and "Traceback" not in err


def test_standard_output_is_no_training_output(world, tmp_path, capsys, monkeypatch):
    # once the checkpoint went to standard output and -.last.pt, -.log.jsonl to files beside it
    features, captions = world
    monkeypatch.chdir(tmp_path)
    code, err = exit_with(["train", "--model", "vse", str(features), str(captions), "-o", "-"], capsys)
    assert code == 2 and "Invalid value for '-o' / '--output': cannot be '-' (standard output)" in err
    assert list(tmp_path.iterdir()) == []


def test_missing_output_folder_fails_before_training(world, tmp_path, capsys):
    features, captions = world
    code, err = exit_with(["train", "--model", "vse", str(features), str(captions), "-o",
                           str(tmp_path / "no" / "m.pt")], capsys)
    assert code == 1 and "does not exist; create it first" in err


def test_sgr_trains_one_epoch_and_writes_its_files(world, tmp_path):
    features, captions = world
    output = tmp_path / "sgr.pt"
    result = CliRunner().invoke(cli, ["--quiet", "train", "--model", "sgr", str(features), str(captions), "-o",
                                      str(output), *TINY_SGR, "--epochs", "1", "--batch-size", "32",
                                      "--device", "cpu"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sgr.pt", "sgr.pt.last.pt", "sgr.pt.log.jsonl"]
    best = load_checkpoint(output)
    assert best["model"] == "sgr" and best["config"]["num_regions"] == 4 and best["config"]["img_dim"] == 16
    assert best["config"]["sgr_step"] == 1 and best["vocab"][:4] == ["<pad>", "<start>", "<end>", "<unk>"]


def test_torchrun_two_gloo_processes_equal_one_process_accumulating(world, tmp_path):
    """What is compared: 2 DDP processes (global batch 16 = 2 shares of 8, gradients all-reduced) against 1
    process with `accumulate=2` (the same 2 shares of 8 as micro-batches, gradients averaged). The data order
    is (seed, epoch)-determined and the vse model has no dropout, so after 2 epochs (16 optimizer steps) the
    weights, the Adam state and every logged loss must agree up to float summation order."""
    features, captions = world
    common = [*TINY, "--batch-size", "16", "--lr", "2e-3", "--epochs", "2", "--val-every", "0", "--device", "cpu",
              "--set", "train.log_every=1"]
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    ddp.mkdir()
    single.mkdir()
    done = torchrun("--quiet", "train", "--model", "vse", features, captions, "-o", ddp / "m.pt", *common)
    assert done.returncode == 0, done.stderr
    result = CliRunner().invoke(cli, ["--quiet", "train", "--model", "vse", str(features), str(captions), "-o",
                                      str(single / "m.pt"), *common, "--set", "train.accumulate=2"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    # only rank 0 wrote: one checkpoint, one resume file, one log with one config line
    assert sorted(p.name for p in ddp.iterdir()) == ["m.pt", "m.pt.last.pt", "m.pt.log.jsonl"]
    logs = {}
    for name, folder in (("ddp", ddp), ("single", single)):
        with open(folder / "m.pt.log.jsonl", encoding="utf-8") as stream:
            logs[name] = [json.loads(line) for line in stream]
    assert logs["ddp"][0]["world_size"] == 2 and logs["single"][0]["world_size"] == 1
    assert [r["type"] for r in logs["ddp"]] == [r["type"] for r in logs["single"]]
    assert sum(r["type"] == "val" for r in logs["ddp"]) == 2
    for a, b in zip(logs["ddp"][1:], logs["single"][1:], strict=True):
        for key in ("loss", "grad_norm", "rsum"):
            if key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), (key, a, b)
    first, second = load_checkpoint(ddp / "m.pt.last.pt"), load_checkpoint(single / "m.pt.last.pt")
    for key, value in first["state_dict"].items():
        torch.testing.assert_close(value, second["state_dict"][key], rtol=1e-5, atol=1e-6)
    assert first["train_state"]["iteration"] == second["train_state"]["iteration"] == 16
    assert len(first["train_state"]["rng"]) == 2  # each rank's dropout RNG, for an exact resume


def test_inputs_in_each_other_s_places_are_named_before_anything_is_read(tmp_path, capsys):
    """`train --model vse CAPS.jsonl FEATS.h5` said 'FEATS.h5: line 1: not UTF-8 text; convert the file to UTF-8'."""
    (tmp_path / "f.h5").write_bytes(HDF5_SIGNATURE + b"not an HDF5 file")     # the kinds by their first bytes
    (tmp_path / "c.jsonl").write_text('{"image_id": ', encoding="utf-8")
    code, err = exit_with(["train", "--model", "vse", str(tmp_path / "c.jsonl"), str(tmp_path / "f.h5"),
                           "-o", str(tmp_path / "m.pt")], capsys)
    assert code == 1 and err == (f"vltools: error: {tmp_path / 'c.jsonl'} and {tmp_path / 'f.h5'} are in each other's "
                                 f"places: {tmp_path / 'c.jsonl'} is JSON text, which CAPS.jsonl takes, and "
                                 f"{tmp_path / 'f.h5'} is HDF5, which FEATS.h5 takes; swap them\n")
    code, err = exit_with(["train", "--model", "rmac", str(tmp_path / "c.jsonl"), str(tmp_path / "c.jsonl"),
                           "-o", str(tmp_path / "m.pt")], capsys)
    assert code == 1 and err == (f"vltools: error: {tmp_path / 'c.jsonl'}: PROXY.h5 must be HDF5, but this is JSON "
                                 "text; --model rmac takes IMAGES.jsonl PROXY.h5\n")


@pytest.mark.parametrize("model, setting, message", [
    ("vse", "model.embed_size=-5", "model.embed_size must be in [1, 1048576], not -5"),
    ("sgr", "model.sim_dim=0", "model.sim_dim must be in [1, 1048576], not 0"),
    ("l2c", "model.num_nodes=0", "model.num_nodes must be in [1, 1048576], not 0"),
    ("neuraltalk2", "model.hidden_size=0", "model.hidden_size must be in [1, 1048576], not 0"),
    ("saf", "model.lambda_softmax=0", "model.lambda_softmax must be in (0.0, inf), not 0.0"),
    ("l2c", "model.gcn_steps=-1", "model.gcn_steps must be in [0, 1048576], not -1"),
    ("sco", "model.sampling=1.5", "model.sampling must be in [0.0, 1.0], not 1.5"),
    ("vse", "model.embed_size=1000000000000", "model.embed_size must be in [1, 1048576], not 1000000000000"),
])
def test_model_settings_are_checked_against_their_schema_before_any_input_is_read(tmp_path, capsys, model, setting,
                                                                                  message):
    """Such settings once failed with tracebacks from tensor construction (or saved a useless model); the inputs
    here are of the right kinds by their first bytes but unreadable, so the check provably runs before anything is
    read or built."""
    features, captions = tmp_path / "feats.h5", tmp_path / "caps.jsonl"
    features.write_bytes(HDF5_SIGNATURE + b"not an HDF5 file")
    captions.write_text('{"image_id": ', encoding="utf-8")
    code, err = exit_with(["train", "--model", model, str(features), str(captions), "-o", str(tmp_path / "m.pt"),
                           "--set", setting], capsys)
    assert code == 1 and err == f"vltools: error: {message}\n"
    assert sorted(tmp_path.iterdir()) == [captions, features]
