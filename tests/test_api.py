"""The Python API (`import vltools`): each function gives what its stage writes, through the same library code."""

from __future__ import annotations

import importlib.util
import inspect
import json
import pydoc
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from matching_helpers import make_world, save_tiny
from tiny_captioning import make_caption_world, save_captioner

import vltools
import vltools.infer.encode as infer_encode
from vltools.cli import cli
from vltools.devices import check_precision
from vltools.errors import VLToolsError
from vltools.io.features import FIELDS, FeaturesReader
from vltools.io.model_store import add_model
from vltools.io.numbers import dumps
from vltools.io.records import read_records, write_records
from vltools.io.sims import read_sims


def run(*args: object) -> str:
    result = CliRunner().invoke(cli, ["--quiet", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def printed(scores: dict) -> dict:
    """Scores as the stage prints them (numbers to 8 significant digits)."""
    return json.loads(dumps(scores))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("apiworld")
    features, captions = make_world(folder)
    return features, captions, save_tiny(folder / "sgr.pt", "sgr", 1), save_tiny(folder / "vse.pt", "vse", 2)


def test_importing_vltools_does_not_import_torch():
    code = "import sys, vltools; names = dir(vltools); print('torch' in sys.modules, callable(vltools.match))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]


def test_every_refused_argument_is_refused_before_torch_loads(world, tmp_path):
    """Four calls that had only bad arguments took 12.3 s together: importing vltools.api imported the stages'
    libraries, and some checks came after torch. Each refusal here, in a fresh process, loads no torch."""
    features, captions, sgr, vse = world
    calls = [f"vltools.match({str(features)!r}, {str(captions)!r}, {str(sgr)!r}, top_k=0)",
             f"vltools.match({str(features)!r}, {str(captions)!r}, {str(sgr)!r}, block_images=0, device='cpu')",
             f"vltools.match({str(features)!r}, {str(captions)!r}, {str(sgr)!r}, device='tpu')",
             f"vltools.encode({str(captions)!r}, {str(vse)!r}, batch_size=0)",
             f"vltools.caption({str(sgr)!r}, {str(features)!r}, beam=0)",
             f"vltools.search({str(features)!r}, {str(features)!r}, top_k=0)",
             f"vltools.search('a red cube', {str(features)!r}, model={str(vse)!r}, batch_size=0)",
             f"vltools.extract_regions({str(tmp_path)!r}, 'f.h5', num_regions=0)",
             "vltools.score_retrieval([{'query_id': 'a'}], protocol='5k')",
             "vltools.load_model('sgr.pt', role='painter')",
             "vltools.convert('webdataset', ['a.tar'], strict=1)",
             "vltools.convert('sgraf-checkpoint', 'model.pth.tar', 'out.pt')",
             "vltools.report('site', top_k=0)",
             "vltools.train('vse', ['f.h5'], 'm.pt', resume=1)"]
    code = ("import sys, vltools\nfrom vltools.errors import VLToolsError\nfor call in sys.argv[1:]:\n"
            "    try:\n        eval(call)\n    except VLToolsError as exc:\n"
            "        print(type(exc).__name__, 'torch' in sys.modules, exc)\n")
    out = subprocess.run([sys.executable, "-c", code, *calls], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.splitlines()
    assert len(out) == len(calls) and all(line.startswith("ArgumentError False ") for line in out), out
    assert "vocab must be a file path" in out[-3]     # a required keyword left out is named


def test_train_and_report_are_plain_functions_beside_their_packages():
    code = ("import sys, inspect, vltools; print('torch' in sys.modules); "
            "import vltools.training.trainer, vltools.reporting.site; "
            "print(inspect.isfunction(vltools.train), inspect.isfunction(vltools.report), "
            "vltools.training.trainer.__name__, list(inspect.signature(vltools.train).parameters)[:3])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    out = out.split(maxsplit=4)
    assert out == ["False", "True", "True", "vltools.training.trainer", "['model', 'inputs', 'output']\n"]
    with pytest.raises(VLToolsError, match="model must be one of"):
        vltools.train("bogus", ["f.h5"], "m.pt")
    with pytest.raises(VLToolsError, match="top_k must be"):
        vltools.report("site", top_k=0)


def test_the_api_is_discoverable_with_dir_and_help():
    api = ["Embeddings", "Matches", "caption", "convert", "encode", "extract_regions", "load_model", "match",
           "report", "score_caption", "score_retrieval", "score_self_retrieval", "score_semantic", "search", "train"]
    assert set(api) <= set(dir(vltools)) and set(api) <= set(vltools.__all__)
    assert not [name for name in dir(vltools) if not name.startswith("__") and name not in api]   # no stray imports
    shown = pydoc.render_doc(vltools, renderer=pydoc.plaintext)
    for name in api:     # in the module's docstring with its one line, and documented below it
        assert f"    {name}" in shown
    assert "match(first, second, model" in shown and "rank captions for images" in shown


def test_match_gives_what_the_stage_writes(world, tmp_path):
    features, captions, sgr, vse = world
    found = vltools.match(features, captions, [sgr, vse], top_k=3, device="cpu")
    run("match", "--model", sgr, "--model", vse, features, captions, "--top-k", 3, "--sims", tmp_path / "s.h5",
        "-o", tmp_path / "r.jsonl", "--device", "cpu")
    written = read_sims(tmp_path / "s.h5")
    np.testing.assert_array_equal(found.sims, written.sims)
    assert (found.row_ids, found.column_ids, found.caption_image_ids) == \
        (written.image_ids, written.caption_ids, written.caption_image_ids)
    assert list(found.rankings()) == read_records(tmp_path / "r.jsonl", "rankings")
    assert found.sims.shape == (7, 21)      # the test split only: 7 images x 3 captions
    assert repr(found) == "Matches(i2t + t2i, 7 images x 21 captions, top 3, sims 7 x 21)"
    loaded = vltools.load_model(sgr)
    assert repr(loaded) == f"LoadedModel('sgr', {str(sgr)!r}, {len(loaded.words)} words)"


def test_score_retrieval_of_matches_equals_the_stage_on_the_written_files(world, tmp_path):
    features, captions, sgr, _ = world
    found = vltools.match(features, captions, sgr, device="cpu")
    run("match", "--model", sgr, features, captions, "--sims", tmp_path / "s.h5", "-o", tmp_path / "r.jsonl",
        "--device", "cpu")
    from_stage = json.loads(run("score", "retrieval", tmp_path / "s.h5"))
    assert printed(vltools.score_retrieval(found)) == from_stage
    assert printed(vltools.score_retrieval(tmp_path / "s.h5")) == from_stage
    ranked = json.loads(run("score", "retrieval", tmp_path / "r.jsonl", "--captions", captions))
    assert printed(vltools.score_retrieval(tmp_path / "r.jsonl", captions)) == ranked
    records = [json.loads(line) for line in captions.read_text().splitlines()]
    assert printed(vltools.score_retrieval(list(found.rankings()), records)) == ranked     # in memory
    assert printed(vltools.score_retrieval(found.rankings(), records)) == ranked     # .rankings() as it comes
    one_fold = vltools.score_retrieval(found, protocol="coco1k", fold_size=7)
    assert printed(one_fold) == {**from_stage, "protocol": "coco1k", "fold_size": 7}


def test_rankings_without_captions_are_refused_in_python_s_words(world):
    """`score_retrieval(m.rankings())` answered 'scores (in memory): a rankings JSONL needs captions=CAPS.jsonl',
    the command line's file and placeholder for records given in memory."""
    features, captions, sgr, _ = world
    found = vltools.match(features, captions, sgr, device="cpu")
    with pytest.raises(VLToolsError) as error:
        vltools.score_retrieval(found.rankings())
    assert str(error.value) == ("scores (in memory): rankings need captions (the captions they rank) to know each "
                                "caption's image")


def test_reranked_matches_have_no_matrix_to_score(world):
    features, captions, sgr, vse = world
    found = vltools.match(features, captions, sgr, rerank_k=4, first_stage=vse, device="cpu")
    assert found.sims is None and len(list(found.rankings())) == 7 + 21
    with pytest.raises(VLToolsError, match="no full similarity matrix"):
        vltools.score_retrieval(found)


def test_models_by_store_name_and_loaded(world, tmp_path, monkeypatch):
    features, captions, sgr, vse = world
    monkeypatch.setenv("VLTOOLS_MODELS", str(tmp_path / "store"))
    add_model("pair", [sgr, vse])
    add_model("one", [sgr])
    by_name = vltools.match(features, captions, "pair", device="cpu")
    by_models = vltools.match(features, captions, [vltools.load_model(sgr), vltools.load_model("one").path, vse],
                              device="cpu")
    assert by_models.sims.shape == by_name.sims.shape
    np.testing.assert_allclose(by_name.sims, vltools.match(features, captions, [sgr, vse], device="cpu").sims)
    assert vltools.load_model("one").name == "sgr"
    with pytest.raises(VLToolsError, match="an ensemble of 2 checkpoints"):
        vltools.load_model("pair")
    with pytest.raises(VLToolsError, match="^role must be one of matching, .*, not 'painter'$"):
        vltools.load_model(sgr, role="painter")
    with pytest.raises(VLToolsError, match="not a captioning model|captioner|caption"):
        vltools.load_model(sgr, role="captioner")


def test_errors_are_the_stage_messages(world):
    features, captions, sgr, _ = world
    with pytest.raises(VLToolsError, match="no model given"):
        vltools.match(features, captions)
    with pytest.raises(VLToolsError, match="no captions in split 'val'"):
        vltools.match(features, captions, sgr, split="val", device="cpu")
    with pytest.raises(VLToolsError, match="^colour is not an argument of vltools.extract_regions; it takes "):
        vltools.extract_regions(features, "x.h5", colour="red")


def test_caption_gives_what_the_stage_writes(tmp_path):
    features, captions = make_caption_world(tmp_path)
    model = save_captioner(tmp_path / "nt.pt", "neuraltalk2", captions, seed=2)   # seed 0 writes only empty captions
    found = vltools.caption(model, features, captions, split="val", beam=2, device="cpu")
    written = [json.loads(line) for line in run("caption", "--model", model, features, captions, "--split", "val",
                                                "--beam", 2, "--device", "cpu").splitlines()]
    assert found == written and len(found) == 10 and all(record["caption"] for record in found)


def test_extract_regions_writes_what_the_stage_writes(tmp_path):
    run("synth", tmp_path / "w", "--images", 10, "--pairs", 0, "--aux-images", 0, "--size", 48)
    images = tmp_path / "w" / "images.jsonl"
    common = {"regions": "boxes", "backbone": "resnet18", "weights": "none", "workers": 0, "image_size": 64,
              "dtype": "float32", "device": "cpu"}
    counts = vltools.extract_regions(images, tmp_path / "api.h5", **common)
    run("extract-regions", images, "--regions", "boxes", "--backbone", "resnet18", "--weights", "none",
        "--workers", 0, "--image-size", 64, "--dtype", "float32", "--device", "cpu", "-o", tmp_path / "cli.h5")
    assert counts == {"written": 10, "failed": 0}
    with h5py.File(tmp_path / "api.h5") as mine, h5py.File(tmp_path / "cli.h5") as theirs:
        assert sorted(mine) == sorted(theirs)
        for name in ("regions", "boxes", "num_regions"):
            np.testing.assert_array_equal(mine[name][:], theirs[name][:])
    with pytest.raises(VLToolsError, match="either num_regions"):
        vltools.extract_regions(images, tmp_path / "bad.h5", num_regions=5, max_regions=9)
    assert not (tmp_path / "bad.h5").exists()


# issue 31: every argument is checked by the validators the command line's options use, before any work, in one
# line naming the argument by its Python name; each case below was accepted, or failed deep inside, before
NAN = float("nan")


@pytest.mark.parametrize(("options", "message"), [
    ({"global_pool": "bogus"}, "global_pool must be one of avg, rmac, tencrop, None, not 'bogus'"),
    ({"image_size": 10**9}, "image_size must be an integer from 16 to 4096, not 1000000000"),
    ({"image_size": "32"}, "image_size must be an integer from 16 to 4096, not '32'"),
    ({"image_size": 32.7}, "image_size must be an integer from 16 to 4096, not 32.7"),
    ({"image_size": -32}, "image_size must be an integer from 16 to 4096, not -32"),
    ({"workers": -3}, "workers must be a non-negative integer, not -3"),
    ({"num_regions": 0}, "num_regions must be a positive integer, not 0"),
    ({"score_threshold": NAN}, "score_threshold must be a finite number from 0 to 1, not nan"),
    ({"max_pixels": 0}, "max_pixels must be an integer from 1 to 268435456, not 0"),
    ({"num_region": 5}, "num_region is not an argument of vltools.extract_regions; did you mean num_regions?"),
])
def test_extract_regions_checks_every_argument_before_any_work(tmp_path, options, message):
    with pytest.raises(VLToolsError) as error:
        vltools.extract_regions(tmp_path / "absent", tmp_path / "out.h5", **options)
    assert str(error.value) == message
    assert list(tmp_path.iterdir()) == []


def test_extract_regions_refuses_output_none_rather_than_writing_hdf5_to_standard_output(tmp_path):
    with pytest.raises(VLToolsError, match=r"^output must be a file path \(str or pathlib.Path\), not None$"):
        vltools.extract_regions(tmp_path / "absent", None)


@pytest.mark.parametrize(("first", "options", "message"), [
    ("f.h5", {"top_k": -1}, "top_k must be a positive integer, not -1"),
    ("f.h5", {"top_k": "10"}, "top_k must be a positive integer, not '10'"),
    ("f.h5", {"top_k": NAN}, "top_k must be a positive integer, not nan"),
    ("f.h5", {"topk": 5}, "topk is not an argument of vltools.match; did you mean top_k?"),
    ("f.h5", {"model": 5}, "model must be a checkpoint path, a model-store name, a LoadedModel or a list of them, "
                           "not 5"),
    ("f.h5", {"rerank_k": 0}, "rerank_k must be a positive integer, not 0"),
    ("f.h5", {"nprobe": -1}, "nprobe must be a positive integer, not -1"),
    ("f.h5", {"image_cache_mb": NAN}, "image_cache_mb must be a non-negative finite number, not nan"),
    (123, {}, "first must be a file path, features ({'ids': [...], 'regions': array, ...}) or Embeddings (from "
              "encode) in memory, not 123"),
])
def test_match_checks_every_argument_before_opening_anything(tmp_path, first, options, message):
    with pytest.raises(VLToolsError) as error:
        vltools.match(first, tmp_path / "caps.jsonl", **{"model": "m.pt", **options})
    assert str(error.value) == message


@pytest.mark.parametrize(("options", "message"), [
    ({"beam": 10**9}, "beam must be an integer from 1 to 100, not 1000000000"),
    ({"beam": 0}, "beam must be an integer from 1 to 100, not 0"),
    ({"beam": -2}, "beam must be an integer from 1 to 100, not -2"),
    ({"beam": NAN}, "beam must be an integer from 1 to 100, not nan"),
    ({"max_len": 10**6}, "max_len must be an integer from 1 to 512, not 1000000"),
    ({"length_penalty": NAN}, "length_penalty must be a non-negative finite number, not nan"),
    ({"precision": "fp8"}, "precision must be one of fp32, tf32, bf16, fp16, not 'fp8'"),
])
def test_caption_checks_its_decoding_limits_as_the_command_line_does(tmp_path, options, message):
    with pytest.raises(VLToolsError) as error:
        vltools.caption(tmp_path / "absent.pt", tmp_path / "f.h5", **options)
    assert str(error.value) == message


def test_score_retrieval_refuses_what_is_not_a_path_without_calling_it_a_missing_file():
    with pytest.raises(VLToolsError) as error:
        vltools.score_retrieval({"a": 1})
    assert str(error.value) == ("scores must be a Matches, rankings records (a list of dicts, as Matches.rankings() "
                                "gives), a file path or a non-empty list of paths, not {'a': 1}")
    with pytest.raises(VLToolsError, match="^fold_size must be a positive integer, not 0$"):
        vltools.score_retrieval("s.h5", fold_size=0)
    with pytest.raises(VLToolsError, match="^protocol must be one of full, coco1k, not 'coco5k'$"):
        vltools.score_retrieval("s.h5", protocol="coco5k")


def test_errors_name_python_arguments_not_command_line_options(world, tmp_path, monkeypatch):
    features, captions, _, _ = world
    monkeypatch.setenv("VLTOOLS_MODELS", str(tmp_path / "store"))
    with pytest.raises(VLToolsError) as error:
        vltools.match(features, captions)
    assert "pass model=CHECKPOINT" in str(error.value) and "--model" not in str(error.value)
    with pytest.raises(VLToolsError) as error:
        vltools.match(features, captions, "no-such-model", device="cpu")
    assert str(error.value).startswith("model=no-such-model: neither a checkpoint file nor a model in the store")
    assert "--model" not in str(error.value)


def test_library_errors_name_python_arguments_where_they_named_force_r_device_and_precision(tmp_path):
    """These library messages spelled the options (--force, --R, --device, --precision) to Python callers too."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine\n")
    (tmp_path / "s.json").write_text("{}\n")
    calls = {
        lambda: vltools.report(tmp_path / "out", scores=tmp_path / "s.json"): "give a new folder, or force=True to",
        lambda: vltools.score_semantic("s.h5", "p.h5", r_values=[10, 1]): "r_values 10,1: give increasing positive",
        lambda: vltools.match("a.h5", "b.h5", device="gpu0"): "device must be auto, cpu, cuda or cuda:K",
    }
    for call, message in calls.items():
        with pytest.raises(VLToolsError, match=message) as error:
            call()
        assert "--" not in str(error.value)
    with pytest.raises(VLToolsError, match=r"^precision='fp64': use fp32, tf32, bf16, fp16$"):
        check_precision("fp64")
    for name in ("s.h5", "p.h5"):   # HDF5 files, so that the input check passes and the option is what is refused
        h5py.File(tmp_path / name, "w").close()
    result = CliRunner().invoke(cli, ["score", "semantic", str(tmp_path / "s.h5"), "--proxy", str(tmp_path / "p.h5"),
                                      "--R", "10,1"])
    assert str(result.exception).startswith("--R 10,1: give increasing positive integers")


def test_convert_takes_each_kind_s_options_by_the_command_s_names():
    """Every keyword of vltools.convert(KIND, ...) is a parameter of `vltools convert KIND` (its name or its flag,
    e.g. precomp's `features` for --features; to-precomp's `captions` argument), and every option but the output is
    a keyword: flickr's --train / --val / --test were split_files={...} in Python."""
    from vltools.api import CONVERTERS
    from vltools.commands.convert import command
    from vltools.commands.options import is_output_param

    for kind, converter in CONVERTERS.items():
        params = [param for param in command.commands[kind].params if param.name != "help"]
        options = [param for param in params if isinstance(param, click.Option)]
        spellings = {param.name: {param.name} | {flag[2:].replace("-", "_") for flag in param.opts
                                                  if flag.startswith("--")} for param in params}
        taken = set(converter.options)
        assert not [name for name in taken if not any(name in spelled for spelled in spellings.values())], kind
        assert not [param.name for param in options if not is_output_param(param) and
                    not spellings[param.name] & taken], kind


def test_files_of_another_kind_are_refused_before_any_model_loads_naming_swaps(world, tmp_path):
    """The command line's input check, from Python: vltools.match("caps.jsonl", "feats.h5") said, once the model had
    loaded, that the captions were 'not a readable HDF5 file ... may be truncated'; vltools.train with CAPS FEATS
    said 'feats.h5: line 1: not UTF-8 text; convert the file to UTF-8'."""
    features, captions, sgr, vse = world
    records = [json.loads(line) for line in captions.read_text().splitlines()]
    swapped = "{} and {} are in each other's places: {} is {}, which {} takes, and {} is {}, which {} takes; swap them"
    calls = {
        lambda: vltools.match(captions, features, sgr): swapped.format(
            captions, features, captions, "JSON text", "second", features, "HDF5", "first"),
        lambda: vltools.encode(vse, features): swapped.format(
            vse, features, vse, "a torch checkpoint", "model", features, "HDF5", "source"),
        lambda: vltools.train("vse", [captions, features], tmp_path / "m.pt"): swapped.format(
            captions, features, captions, "JSON text", "CAPS.jsonl", features, "HDF5", "FEATS.h5"),
        lambda: vltools.train("vse", [records, features], tmp_path / "m.pt"): swapped.format(
            "inputs[0] (in memory)", features, "inputs[0] (in memory)", "records (a list of dicts)", "CAPS.jsonl",
            features, "HDF5", "FEATS.h5"),
        lambda: vltools.match(features, captions, [sgr, captions]):
            f"{captions}: model[1] must be a torch checkpoint, but this is JSON text; see help(vltools.match)",
        lambda: vltools.score_caption(records, features):
            f"{features}: refs must be JSON lines or JSON, but this is HDF5; see help(vltools.score_caption)",
    }
    for call, message in calls.items():
        with pytest.raises(VLToolsError) as error:
            call()
        assert str(error.value) == message
    assert not (tmp_path / "m.pt").exists()


def test_data_in_memory_in_each_other_s_places_is_named_as_swapped(world, tmp_path):
    """`vltools.match(caps, feats)` with both in memory said only that `first` must be features; files were named as
    swapped, and now data in memory is too, alone or beside a file."""
    features, captions, sgr, vse = world
    records, arrays = lines(captions), held(features)
    swapped = "{} and {} are in each other's places: {} is {}, which {} takes, and {} is {}, which {} takes; swap them"
    as_records, as_features = "records (a list of dicts)", "features (a dict of 'ids' and arrays)"
    calls = {
        lambda: vltools.match(records, arrays, sgr): swapped.format(
            "first (in memory)", "second (in memory)", "first (in memory)", as_records, "second", "second (in memory)",
            as_features, "first"),
        lambda: vltools.match(records, features): swapped.format(
            "first (in memory)", features, "first (in memory)", as_records, "second", features, "HDF5", "first"),
        lambda: vltools.encode(vse, arrays): swapped.format(
            vse, "model (in memory)", vse, "a torch checkpoint", "model", "model (in memory)", as_features, "source"),
        lambda: vltools.caption(sgr, records, arrays): swapped.format(
            "features (in memory)", "captions (in memory)", "features (in memory)", as_records, "captions",
            "captions (in memory)", as_features, "features"),
    }
    for call, message in calls.items():
        with pytest.raises(VLToolsError) as error:
            call()
        assert str(error.value) == message


def test_features_in_memory_missing_a_key_name_it(world):
    """A features dict without "ids" was refused as 'first must be a file path, features ... not {...}', and one
    without the regions a stage reads as 'first (in memory): has no /regions dataset'."""
    features, captions, sgr, _ = world
    arrays = held(features)
    calls = {
        lambda: vltools.match({"regions": arrays["regions"]}, captions, sgr, device="cpu"):
            "first has no 'ids' key; give the id of each row as 'ids' beside 'regions'",
        lambda: vltools.match({"ids": arrays["ids"], "global": arrays["regions"].mean(1)}, captions, sgr,
                              device="cpu"):
            "first has no 'regions' key; matching models need region features (vltools extract-regions)",
        lambda: vltools.report("site", boxes={"regions": arrays["regions"]}):
            "boxes has no 'ids' key; give the id of each row as 'ids' beside 'regions'",
    }
    for call, message in calls.items():
        with pytest.raises(VLToolsError) as error:
            call()
        assert str(error.value) == message


def test_an_empty_split_names_the_python_argument_that_chose_it(world, tmp_path):
    """A split with no captions was refused as 'choose one with --split' (or --val-split) from Python too."""
    features, captions, _, vse = world
    train_only = [{"image_id": r["image_id"], "caption": r["caption"], "split": "train"}
                  for r in map(json.loads, captions.read_text().splitlines())]
    calls = {
        lambda: vltools.encode(train_only, vse, device="cpu"): "(splits present: train; choose one with split)",
        lambda: vltools.train("vse", [features, train_only], tmp_path / "m.pt"):
            "(splits present: train; choose one with val_split)",
    }
    for call, message in calls.items():
        with pytest.raises(VLToolsError, match=re.escape(message)) as error:
            call()
        assert "--" not in str(error.value)


def test_scores_from_memory_are_checked_as_scores_from_files_are(world, tmp_path):
    features, captions, sgr, _ = world
    found = vltools.match(features, captions, sgr, device="cpu")
    found.sims[:] = np.nan
    with pytest.raises(VLToolsError, match=r"^matches: contains NaN or infinite scores \(row 0, image "):
        vltools.score_retrieval(found)
    found.sims[:] = 0.5
    found.sims[2, 3] = np.inf
    with pytest.raises(VLToolsError, match=r"contains NaN or infinite scores \(row 2, image "):
        vltools.score_retrieval(found)


def test_search_queries_a_saved_index_like_match_index_file(tmp_path):
    """`vltools.search` returns the Matches of `match QUERIES --index-file`: the brute-force top-k for Flat."""
    pytest.importorskip("faiss")
    from index_helpers import save, unit

    rng = np.random.default_rng(0)
    images, captions = unit(rng.normal(size=(50, 8))), unit(rng.normal(size=(6, 8)))
    save(tmp_path / "imgs.h5", "i", images, "images")
    save(tmp_path / "caps.h5", "c", captions, "captions")
    run("index", tmp_path / "imgs.h5", "-o", tmp_path / "g.h5")
    found = vltools.search(tmp_path / "caps.h5", tmp_path / "g.h5", top_k=4)
    assert "search" in vltools.__all__ and found.direction == "t2i"
    assert repr(found) == "Matches(t2i, 6 captions x 50 images, top 4, no sims)"    # once "6 images x 50 captions"
    assert (found.row_ids, found.column_ids) == ([f"c{k}" for k in range(6)], [f"i{k}" for k in range(50)])
    np.testing.assert_array_equal(found.forward[1], np.argsort(-(captions @ images.T), axis=1)[:, :4])
    assert list(found.rankings()) == [json.loads(line) for line in
                                      run("match", tmp_path / "caps.h5", "--index-file", tmp_path / "g.h5", "-k", "4")
                                      .splitlines()]


def test_score_caption_gives_what_the_stage_prints(tmp_path):
    refs = tmp_path / "refs.jsonl"
    refs.write_text("".join(json.dumps({"image_id": i, "caption": text}) + "\n" for i, text in
                            [("1", "A dog runs on grass."), ("1", "a brown dog running"), ("2", "Two cats sleep.")]))
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(json.dumps({"image_id": "1", "caption": "a dog running on the grass"}) + "\n" +
                           json.dumps({"image_id": "2", "caption": "two cats"}) + "\n")
    found = vltools.score_caption(predictions, refs, spice=False, meteor=False)
    printed_by_stage = json.loads(run("score", "caption", predictions, "--refs", refs, "--no-spice", "--no-meteor"))
    assert printed(found) == printed_by_stage
    assert set(found) == {"Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ROUGE_L", "CIDEr"} and found["Bleu_1"] > 0
    records = [json.loads(line) for line in predictions.read_text().splitlines()]
    references = [{**json.loads(line), "image_id": int(json.loads(line)["image_id"])}    # as convert("coco") gives
                  for line in refs.read_text().splitlines()]
    assert vltools.score_caption(records, references, spice=False, meteor=False) == found
    coco = {"images": [{"id": 1}, {"id": 2}], "annotations": [{"id": k, **record} for k, record in
                                                              enumerate(references)]}
    assert vltools.score_caption(tuple(records), coco, spice=False, meteor=False) == found


def test_records_in_memory_are_checked_as_their_file_and_named_by_their_index(tmp_path):
    refs = [{"image_id": "1", "caption": "a dog"}, {"image_id": "2", "caption": "two cats"}]
    with pytest.raises(VLToolsError) as error:
        vltools.score_caption([{"image_id": "1", "caption": "a dog"}, {"caption": "a cat"}], refs)
    assert str(error.value) == ("predictions[1]: no 'image_id' or 'pair_id' field; each caption needs the id it "
                                "describes")
    with pytest.raises(VLToolsError, match=r"^refs \[1\] cannot be written as JSON \(Object of type int64 is not JSON "
                                           r"serializable\); give plain str, int, float, list and dict values$"):
        vltools.score_caption(refs, [refs[0], {"image_id": np.int64(2), "caption": "two cats"}])
    with pytest.raises(VLToolsError, match=r"^refs must be a file path, records \(a non-empty list of dicts\) or a "
                                           r"dict in memory, not \[\]$"):
        vltools.score_caption(refs, [])


def held(features) -> dict:
    """A features file in memory, as a notebook holds it: {"ids": [...], dataset: array, ...}."""
    with h5py.File(features) as handle:
        return {"ids": list(handle["ids"].asstr()),
                **{name: handle[name][:] for name in handle if name in FIELDS}}


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_encode_returns_the_embeddings_the_stage_writes(world, tmp_path):
    features, captions, _, vse = world
    found = vltools.encode(captions, vse, tmp_path / "api.h5", split="test", device="cpu")
    run("encode", captions, "--model", vse, "--split", "test", "--device", "cpu", "-o", tmp_path / "cli.h5")
    images = vltools.encode(features, vltools.load_model(vse, "encodable"), device="cpu")    # nothing written
    run("encode", features, "--model", vse, "--device", "cpu", "-o", tmp_path / "cli_img.h5")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["api.h5", "cli.h5", "cli_img.h5"]
    for returned, api, cli_file in ((found, "api.h5", "cli.h5"), (images, None, "cli_img.h5")):
        for written in filter(None, (api, cli_file)):
            with h5py.File(tmp_path / written) as theirs:
                np.testing.assert_array_equal(returned.vectors, theirs["emb"][:])
                assert returned.ids == list(theirs["ids"].asstr())
                assert returned.attrs["checkpoint_digest"] == theirs.attrs["checkpoint_digest"]
    with h5py.File(tmp_path / "cli.h5") as theirs:
        assert found.caption_image_ids == list(theirs["caption_image_ids"].asstr())
    assert (found.side, images.side, len(found.ids), len(images.ids)) == ("captions", "images", 21, 9)
    assert repr(found) == f"Embeddings(captions, 21 x {found.vectors.shape[1]}, vse)"


def _stopped_at_the_fourth_batch(real):
    """`real` (a generator function) interrupted by Ctrl-C before its fourth batch."""
    def stopped(*given: object, **options: object):
        for number, batch in enumerate(real(*given, **options)):
            if number == 3:
                raise KeyboardInterrupt
            yield batch
    return stopped


def test_encode_resumes_an_interrupted_run_into_the_same_output(world, tmp_path, monkeypatch):
    features, captions, _, vse = world
    whole = vltools.encode(captions, vse, split="test", device="cpu", batch_size=2)
    real = infer_encode.embed_blocks

    monkeypatch.setattr(infer_encode, "embed_blocks", _stopped_at_the_fourth_batch(real))
    with pytest.raises(KeyboardInterrupt):
        vltools.encode(captions, vse, tmp_path / "out.h5", split="test", device="cpu", batch_size=2)
    assert [path.name for path in tmp_path.iterdir()] == ["out.h5.partial"]
    monkeypatch.setattr(infer_encode, "embed_blocks", real)
    with pytest.raises(VLToolsError, match="left by an interrupted run; continue it with resume=True"):
        vltools.encode(captions, vse, tmp_path / "out.h5", split="test", device="cpu", batch_size=2)
    resumed = vltools.encode(captions, vse, tmp_path / "out.h5", split="test", device="cpu", batch_size=2,
                             resume=True)
    np.testing.assert_allclose(resumed.vectors, whole.vectors, rtol=1e-6, atol=1e-7)
    assert resumed.ids == whole.ids and [path.name for path in tmp_path.iterdir()] == ["out.h5"]
    with pytest.raises(VLToolsError, match="^resume needs output=PATH"):
        vltools.encode(captions, vse, split="test", device="cpu", resume=True)


def test_encode_takes_captions_and_features_in_memory(world, tmp_path):
    torch = pytest.importorskip("torch")
    features, captions, _, vse = world
    from_files = [vltools.encode(captions, vse, split="test", device="cpu"),
                  vltools.encode(features, vse, device="cpu")]
    arrays = held(features)
    tensors = {**arrays, "regions": torch.from_numpy(arrays["regions"]).requires_grad_()}    # a tensor on a graph
    for source, expected in ((lines(captions), from_files[0]), (arrays, from_files[1]), (tensors, from_files[1])):
        found = vltools.encode(source, vse, split="test", device="cpu")
        np.testing.assert_array_equal(found.vectors, expected.vectors)
        assert (found.ids, found.caption_image_ids) == (expected.ids, expected.caption_image_ids)
    assert found.attrs["source"] == "source (in memory)"      # read in memory, not from a temporary file


def test_encode_resumed_from_features_in_memory_keeps_no_row_of_the_interrupted_run(world, tmp_path, monkeypatch):
    """A resumed run keeps the rows whose input files are unchanged; features in memory have no file to compare, so
    it computes every row again: the interrupted run here encoded other features."""
    features, _, _, vse = world
    arrays = held(features)
    real = infer_encode.embed_blocks

    monkeypatch.setattr(infer_encode, "embed_blocks", _stopped_at_the_fourth_batch(real))
    with pytest.raises(KeyboardInterrupt):
        vltools.encode({**arrays, "regions": arrays["regions"] + 1}, vse, tmp_path / "out.h5", device="cpu",
                       batch_size=2)
    assert [path.name for path in tmp_path.iterdir()] == ["out.h5.partial"]
    monkeypatch.setattr(infer_encode, "embed_blocks", real)
    resumed = vltools.encode(arrays, vse, tmp_path / "out.h5", device="cpu", batch_size=2, resume=True)
    np.testing.assert_allclose(resumed.vectors, vltools.encode(features, vse, device="cpu").vectors, rtol=1e-6,
                               atol=1e-7)


def test_match_takes_features_captions_and_embeddings_in_memory(world, tmp_path):
    features, captions, sgr, vse = world
    from_files = vltools.match(features, captions, sgr, top_k=3, device="cpu")
    from_memory = vltools.match(held(features), lines(captions), sgr, top_k=3, device="cpu")
    np.testing.assert_array_equal(from_memory.sims, from_files.sims)
    assert list(from_memory.rankings()) == list(from_files.rankings())
    assert from_memory.attrs["features"] == "first (in memory)"      # read in memory, not from a temporary file
    run("encode", features, "--model", vse, "--device", "cpu", "-o", tmp_path / "img.h5")
    run("encode", captions, "--model", vse, "--split", "test", "--device", "cpu", "-o", tmp_path / "cap.h5")
    from_files = vltools.match(tmp_path / "img.h5", tmp_path / "cap.h5", top_k=3, device="cpu")
    from_memory = vltools.match(vltools.encode(features, vse, device="cpu"),
                                vltools.encode(captions, vse, split="test", device="cpu"), top_k=3, device="cpu")
    np.testing.assert_array_equal(from_memory.sims, from_files.sims)
    assert list(from_memory.rankings()) == list(from_files.rankings())


def test_match_reranks_features_in_memory_searching_a_saved_index(world, tmp_path):
    pytest.importorskip("faiss")
    features, captions, sgr, vse = world
    run("encode", features, "--model", vse, "--device", "cpu", "-o", tmp_path / "img.h5")
    run("index", tmp_path / "img.h5", "-o", tmp_path / "g.h5")
    options = {"rerank_k": 3, "first_stage": vse, "index_file": tmp_path / "g.h5", "top_k": 3, "device": "cpu"}
    from_files = vltools.match(features, captions, sgr, **options)
    assert vltools.match(held(features), lines(captions), sgr, **options).rankings() == from_files.rankings()


def test_caption_takes_features_and_captions_in_memory_and_writes_only_when_asked(tmp_path):
    features, captions = make_caption_world(tmp_path)
    model = save_captioner(tmp_path / "nt.pt", "neuraltalk2", captions, seed=2)
    from_files = vltools.caption(model, features, captions, split="val", beam=2, device="cpu")
    found = vltools.caption(model, held(features), lines(captions), tmp_path / "c.jsonl", split="val", beam=2,
                            device="cpu")
    assert found == from_files and lines(tmp_path / "c.jsonl") == found


def test_data_in_memory_is_checked_as_its_file_is(world, tmp_path):
    features, captions, sgr, _ = world
    arrays = held(features)
    with pytest.raises(VLToolsError) as error:
        vltools.match({**arrays, "regions": arrays["regions"][:3]}, captions, sgr, device="cpu")
    assert str(error.value) == "first ['regions'] has 3 rows for 9 ids; give one row per id"
    with pytest.raises(VLToolsError) as error:
        vltools.match({**arrays, "colour": 1}, captions, sgr, device="cpu")
    assert str(error.value).startswith("first holds 'colour', not a features dataset; give 'ids' and arrays among ")
    broken = {**arrays, "regions": arrays["regions"].copy()}
    broken["regions"][4, 0, 0] = np.nan
    with pytest.raises(VLToolsError, match=r"^first \['regions'\]: image id '\w+' holds NaN or infinite values; "
                                          r"give finite numbers$"):
        vltools.match(broken, captions, sgr, device="cpu")
    with pytest.raises(VLToolsError, match=r"^second\[2\]: "):
        vltools.match(arrays, [*lines(captions)[:2], {"caption": "no image", "split": "test"}], sgr, device="cpu")
    embeddings = vltools.encode(captions, world[3], split="test", device="cpu")
    embeddings.vectors = embeddings.vectors[:5]
    with pytest.raises(VLToolsError, match=r"^second has 5 rows for 21 ids; give one row per id$"):
        vltools.match(vltools.encode(features, world[3], device="cpu"), embeddings, device="cpu")


def test_search_takes_embeddings_in_memory(tmp_path):
    pytest.importorskip("faiss")
    from index_helpers import save, unit

    rng = np.random.default_rng(0)
    save(tmp_path / "imgs.h5", "i", unit(rng.normal(size=(50, 8))), "images")
    save(tmp_path / "caps.h5", "c", unit(rng.normal(size=(6, 8))), "captions")
    run("index", tmp_path / "imgs.h5", "-o", tmp_path / "g.h5")
    from vltools.io.embeddings import read_embeddings

    found = vltools.search(read_embeddings(tmp_path / "caps.h5"), tmp_path / "g.h5", top_k=4)
    assert list(found.rankings()) == list(vltools.search(tmp_path / "caps.h5", tmp_path / "g.h5", top_k=4).rankings())


def test_train_with_a_config_dict_and_set_keys_equals_the_stage(tmp_path):
    from tiny_matching import make_world as make_training_world

    features, captions = make_training_world(tmp_path)
    summary = vltools.train("vse", [features, captions], tmp_path / "api.pt",
                            config={"train": {"epochs": 1, "batch_size": 16, "device": "cpu"}},
                            set={"model.embed_size": 32, "word_dim": 16})
    run("train", "--model", "vse", features, captions, "--epochs", "1", "--batch-size", "16", "--device", "cpu",
        "--set", "model.embed_size=32", "--set", "word_dim=16", "-o", tmp_path / "cli.pt")
    mine, theirs = (torch_load(tmp_path / name) for name in ("api.pt", "cli.pt"))
    assert mine["config"] == theirs["config"] and mine["config"]["embed_size"] == 32
    assert mine["train_state"]["config"] == theirs["train_state"]["config"]
    for key, value in mine["state_dict"].items():
        assert np.array_equal(value.numpy(), theirs["state_dict"][key].numpy()), key
    assert summary["epoch"] == 1
    vltools.train("vse", [held(features), lines(captions)], tmp_path / "memory.pt",
                  config={"train": {"epochs": 1, "batch_size": 16, "device": "cpu"}},
                  set={"model.embed_size": 32, "word_dim": 16})
    from_memory = torch_load(tmp_path / "memory.pt")
    assert from_memory["config"] == mine["config"]
    for key, value in mine["state_dict"].items():
        assert np.array_equal(value.numpy(), from_memory["state_dict"][key].numpy()), key


def torch_load(path) -> dict:
    from vltools.io.checkpoints import load_checkpoint

    return load_checkpoint(path)


def test_convert_gives_the_records_the_stage_writes(tmp_path):
    from test_convert_webdataset import SAMPLES, _shard

    shard = _shard(tmp_path / "shard.tar", SAMPLES)
    records = vltools.convert("webdataset", [shard], tmp_path / "api.jsonl", split="test")
    run("convert", "webdataset", shard, "--split", "test", "-o", tmp_path / "cli.jsonl")
    assert (tmp_path / "api.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()
    assert records == read_records(tmp_path / "cli.jsonl", "captions") and len(records) == 3


def test_convert_takes_every_kind_of_the_command_and_checks_every_keyword_of_its_function():
    from vltools.api import CONVERTERS

    assert set(CONVERTERS) == set(cli.get_command(None, "convert").commands) and len(CONVERTERS) == 16
    for kind, converter in CONVERTERS.items():    # the keywords without a default are checked when left out too
        parameters = inspect.signature(converter.function).parameters
        assert converter.required == tuple(name for name in converter.options
                                           if parameters[name].default is inspect.Parameter.empty), kind
    for kind, converter in CONVERTERS.items():    # all but the source, the output and a memory knob no command shows
        keywords = set(list(inspect.signature(converter.function).parameters)[1:]) - {converter.output, "chunk_bytes"}
        assert set(converter.options) == keywords, kind


def test_convert_visual_genome_gives_the_records_the_stage_writes(tmp_path):
    from test_convert_visual_genome import IMAGES, REGIONS

    records = vltools.convert("visual-genome", REGIONS, tmp_path / "api.jsonl", image_data=IMAGES, clip_boxes=True)
    run("convert", "visual-genome", REGIONS, "--image-data", IMAGES, "--clip-boxes", "-o", tmp_path / "cli.jsonl")
    assert (tmp_path / "api.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()
    assert records == read_records(tmp_path / "cli.jsonl", "regions")
    assert {r["image_id"] for r in records} == {"1", "2", "3", "4", "5"}
    sizes = {"1": [600, 800], "2": [600, 800], "3": [480, 640], "4": [480, 640], "5": [600, 800]}  # image_data's
    for record in records:
        assert record["image_size"] == sizes[record["image_id"]]
        height, width = record["image_size"]
        assert 0 <= record["box"][0] < record["box"][2] <= width and 0 <= record["box"][1] < record["box"][3] <= height


def test_convert_precomp_and_back_writes_the_files_and_counts_them(tmp_path):
    from test_convert_precomp import DATA, derived_names, raw_lines

    folder = tmp_path / "f30k_precomp"
    folder.mkdir()
    shutil.copy(DATA / "f30k_precomp" / "test_caps.txt", folder)
    names = derived_names()                      # the real 50 image names of the 250 real captions
    (folder / "test_imagename.txt").write_text("\n".join(names) + "\n")
    images = np.random.default_rng(0).standard_normal((50, 4, 8)).astype(np.float32)
    np.save(folder / "test_ims.npy", images)
    feats, caps = tmp_path / "feats.h5", tmp_path / "caps.jsonl"
    assert vltools.convert("precomp", folder, split="test", features=feats, captions=caps) == {"images": 50,
                                                                                                "captions": 250}
    with FeaturesReader(feats) as reader:
        assert reader.ids == names
        np.testing.assert_array_equal(reader.read(names, ["regions"])["regions"], images)
    lines = raw_lines(folder / "test_caps.txt")
    assert [(r["image_id"], r["caption"]) for r in read_records(caps, "captions")] == [
        (names[i // 5], line) for i, line in enumerate(lines)]
    back = tmp_path / "back"
    written = vltools.convert("to-precomp", feats, back, captions=caps, split="test")
    assert written == {"images": 50, "captions": 250,
                       "files": [str(back / name) for name in ("test_ims.npy", "test_caps.txt", "test_ids.txt")]}
    np.testing.assert_array_equal(np.load(back / "test_ims.npy"), images)
    assert raw_lines(back / "test_caps.txt") == lines and (back / "test_ids.txt").read_text().splitlines() == names
    from_memory = vltools.convert("to-precomp", held(feats), tmp_path / "memory", captions=read_records(caps,
                                                                                                         "captions"),
                                  split="test")
    assert {**from_memory, "files": None} == {**written, "files": None}
    for name in ("test_ims.npy", "test_caps.txt", "test_ids.txt"):
        assert (tmp_path / "memory" / name).read_bytes() == (back / name).read_bytes(), name


def test_convert_to_coco_results_and_the_scan_vocabularies(tmp_path):
    from test_io_coco import RESULTS
    from test_sgraf_checkpoint import VOCAB_JSON

    raw = json.loads(RESULTS.read_text())
    assert len(vltools.convert("coco", RESULTS, tmp_path / "caps.jsonl")) == 1000
    assert vltools.convert("to-coco-results", tmp_path / "caps.jsonl", tmp_path / "results.json") == {"results": 1000}
    assert json.loads((tmp_path / "results.json").read_text()) == [
        {"image_id": r["image_id"], "caption": r["caption"].strip()} for r in raw]
    records = vltools.convert("coco", RESULTS)
    assert vltools.convert("to-coco-results", records, tmp_path / "memory.json") == {"results": 1000}
    assert (tmp_path / "memory.json").read_bytes() == (tmp_path / "results.json").read_bytes()
    scan = json.loads(VOCAB_JSON.read_text())
    assert vltools.convert("scan-vocab", VOCAB_JSON, tmp_path / "vocab.json") == {"words": 8481}
    words = json.loads((tmp_path / "vocab.json").read_text())["words"]
    assert words == [scan["idx2word"][str(i)] for i in range(8481)]
    assert vltools.convert("to-scan-vocab", tmp_path / "vocab.json", tmp_path / "scan.json") == {"words": 8481}
    assert json.loads((tmp_path / "scan.json").read_text()) == scan


def test_convert_bottom_up_features_keep_the_detections(tmp_path):
    from test_convert_bottom_up import check, detections, write_anderson_tsv

    items = detections([4, 7, 2])
    write_anderson_tsv(tmp_path / "x.tsv", items)
    assert vltools.convert("bottom-up", tmp_path / "x.tsv", tmp_path / "f.h5", max_regions=5) == {"images": 3}
    check(tmp_path / "f.h5", items, 5, with_counts=True)


def test_convert_imports_the_released_checkpoints(tmp_path, monkeypatch):
    import torch
    from test_convert_bottom_up_weights import TINY, milvlg_state, tiny_model
    from test_sgraf_checkpoint import VOCAB_JSON, write_released

    from vltools.io.checkpoints import load_checkpoint
    from vltools.models.bottom_up import BottomUpAttention

    _, parts, path = write_released(tmp_path, "SGR")
    written = vltools.convert("sgraf-checkpoint", path, tmp_path / "sgr.pt", vocab=VOCAB_JSON, trust=True)
    saved = load_checkpoint(tmp_path / "sgr.pt")
    assert saved["model"] == written["model"] == "sgr" and written["config"] == saved["config"]
    assert saved["config"]["embed_size"] == 32 and len(saved["vocab"]) == 8481
    for prefix, part in zip(("img_enc", "txt_enc", "sim_enc"), parts, strict=True):
        for key, tensor in part.items():
            assert torch.equal(saved["state_dict"][f"{prefix}.{key}"], tensor), key
    model = tiny_model()
    torch.save({"model": milvlg_state(model)}, tmp_path / "bua.pth")
    # the released detector is a ResNet-101: the tiny one stands for it as the default the command converts to
    monkeypatch.setattr(BottomUpAttention, "DEFAULTS", {**BottomUpAttention.DEFAULTS, **TINY})
    assert vltools.convert("bottom-up-weights", tmp_path / "bua.pth", tmp_path / "bua.pt") == {
        "layout": "bottom-up-attention.pytorch"}
    fresh = BottomUpAttention(**load_checkpoint(tmp_path / "bua.pt")["config"])
    fresh.load_state_dict(load_checkpoint(tmp_path / "bua.pt")["state_dict"], strict=True)
    assert torch.equal(fresh.predictor.attr_fc.weight, model.predictor.attr_fc.weight)


@pytest.mark.parametrize(("call", "message"), [
    (lambda p: vltools.convert("precomp", p / "d", features=p / "f.h5"),
     "split must be a split name (a non-empty string of printable characters, without a slash), not None"),
    (lambda p: vltools.convert("webdataset", [p / "s.tar"], split=""),
     "split must be a split name (a non-empty string of printable characters, without a slash), not ''"),
    (lambda p: vltools.convert("cub", p / "text_c10", split_files={"te\x1bst": p / "a.txt"}),
     r"split_files must be a split name (a non-empty string of printable characters, without a slash), not 'te\x1bst'"),
    (lambda p: vltools.convert("to-precomp", p / "f.h5", p / "out", split="test"),
     "captions must be a file path or records (a non-empty list of dicts) in memory, not None"),
    (lambda p: vltools.convert("sgraf-checkpoint", p / "m.pth", p / "m.pt", trust=True),
     "vocab must be a file path (str or pathlib.Path), not None"),
    (lambda p: vltools.convert("scan-vocab", p / "v.json"), "output must be a file path (str or pathlib.Path), not "
                                                            "None"),
    (lambda p: vltools.convert("precomp", p / "d", p / "f.h5", split="test"),
     "output is not taken by precomp, which names its outputs by keyword"),
    (lambda p: vltools.convert("precomp", p / "d", split="test"),
     "features or captions must be given (or both): nothing to write"),
    (lambda p: vltools.convert("precomp", p / "d", split="test", captions=p / "c.jsonl", captions_per_image="5"),
     "captions_per_image must be a positive integer, not '5'"),
    (lambda p: vltools.convert("precomp", p / "d", split="test", captions=p / "c.jsonl", dtype="float64"),
     "dtype must be one of float16, float32, not 'float64'"),
    (lambda p: vltools.convert("visual-genome", p / "r.json", clip_boxes=True),
     "clip_boxes needs image_data: the image sizes to clip to"),
    (lambda p: vltools.convert("visual-genome", p / "r.json", clip_boxes=1), "clip_boxes must be True or False, not 1"),
    (lambda p: vltools.convert("cub", p / "text_c10", split_files=[("test", p / "a.txt"), ("test", p / "b.txt")]),
     "split_files names split 'test' twice; give one file per split"),
    (lambda p: vltools.convert("cub", p / "text_c10", split_files="test.txt"),
     "split_files must be a dict {split: file} or a list of (split, file) pairs, not 'test.txt'"),
    (lambda p: vltools.convert("karpathy", p / "d.json", only_splits="test"),
     "only_splits must be a list of split names, not 'test'"),
    (lambda p: vltools.convert("bottom-up", [p / "x.tsv"], p / "f.h5", fields=3),
     "fields must be a list of words, not 3"),
    (lambda p: vltools.convert("bottom-up", [p / "x.tsv"], p / "f.h5", max_regions=0),
     "max_regions must be a positive integer, not 0"),
    (lambda p: vltools.convert("bottom-up", [p / "x.tsv"], p / "f.h5", max_region=5),
     "max_region is not an argument of vltools.convert; did you mean max_regions?"),
    (lambda p: vltools.convert("bottom-up-weights", p / "w.pth", p / "w.pt", trust="yes"),
     "trust must be True or False, not 'yes'"),
    (lambda p: vltools.convert("to-precomp", p / "f.h5", p / "out", captions=p / "c.jsonl", split="test",
                               chunk_bytes=1), "chunk_bytes is not an argument of vltools.convert"),
])
def test_convert_checks_every_kind_s_arguments_before_any_work(tmp_path, call, message):
    with pytest.raises(VLToolsError) as error:
        call(tmp_path)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_convert_messages_spell_options_as_python_keywords(tmp_path):
    released = tmp_path / "model_best.pth.tar"
    released.write_bytes(b"not read: refused before loading")
    with pytest.raises(VLToolsError, match="pass trust=True if you trust where the file came from$") as error:
        vltools.convert("sgraf-checkpoint", released, tmp_path / "m.pt", vocab=tmp_path / "vocab.json")
    assert "--" not in str(error.value)
    result = CliRunner().invoke(cli, ["convert", "sgraf-checkpoint", str(released), "--vocab",
                                      str(tmp_path / "vocab.json"), "-o", str(tmp_path / "m.pt")])
    assert "pass --trust if you trust" in str(result.exception)


@pytest.mark.parametrize(("call", "message"), [
    (lambda p: vltools.score_caption(p / "p.jsonl", 5), "refs must be a file path, records (a non-empty list of "
                                                        "dicts) or a dict in memory, not 5"),
    (lambda p: vltools.score_caption(p / "p.jsonl", p / "r.jsonl", spice="no"), "spice must be True or False, "
                                                                                 "not 'no'"),
    (lambda p: vltools.encode(p / "c.jsonl", p / "m.pt", 5), "output must be a file path (str or pathlib.Path) or "
                                                             "None, not 5"),
    (lambda p: vltools.encode(p / "c.jsonl", p / "m.pt", p / "o.h5", batch_size=0),
     "batch_size must be a positive integer, not 0"),
    (lambda p: vltools.encode(p / "c.jsonl", p / "m.pt", p / "o.h5", image_size=10**9),
     "image_size must be an integer from 32 to 4096, not 1000000000"),
    (lambda p: vltools.encode(p / "c.jsonl", p / "m.pt", p / "o.h5", with_txt=True),
     "with_txt is not an argument of vltools.encode; did you mean with_text?"),
    (lambda p: vltools.train("bogus", [p / "f.h5"], p / "m.pt"), "model must be one of "),
    (lambda p: vltools.train("vse", [p / "f.h5"], p / "m.pt", config=3),
     "config must be a file path (str or pathlib.Path), not 3"),
    (lambda p: vltools.train("vse", [p / "f.h5"], p / "m.pt", set={"train.epochs": 0}),
     "epochs: train.epochs must be in [1, inf), not 0"),
    (lambda p: vltools.train("vse", [p / "f.h5"], p / "m.pt", set=["epochs=1"]),
     "set must be a dict of config sections or KEY: value, not ['epochs=1']"),
    (lambda p: vltools.convert("bogus", p / "x.json"), "kind must be one of karpathy, coco, flickr, "),
    (lambda p: vltools.convert("coco", p / "x.json", id_feld="id"),
     "id_feld is not an argument of vltools.convert; did you mean id_field?"),
    (lambda p: vltools.convert("webdataset", [], p / "x.jsonl"),
     "source must be a file path or a non-empty list of paths, not []"),
    # once ValueError: embedded null byte, and OverflowError
    (lambda p: vltools.convert("webdataset", ["go\0od.tar"]),
     "source must be a file path without a NUL character, not 'go\\x00od.tar'"),
    (lambda p: vltools.train("vse", ["fe\0ats.h5", p / "c.jsonl"], p / "m.pt"),
     "inputs must be a file path without a NUL character"),
    (lambda p: vltools.caption(p / "m.pt", p / "f.h5", length_penalty=10**400),
     "length_penalty must be a non-negative finite number, not an integer of about 400 digits"),
])
def test_the_new_functions_check_their_arguments_before_any_work(tmp_path, call, message):
    with pytest.raises(VLToolsError) as error:
        call(tmp_path)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []


RECORDS = [{"image_id": str(k), "caption": f"a man riding a horse along the beach at dusk, number {k}"}
           for k in range(5000)]     # about 400 KB: a converted dataset given where a path was expected


@pytest.mark.parametrize("call", [
    lambda p: vltools.score_caption([*RECORDS, {"image_id": "x"}], RECORDS),
    lambda p: vltools.score_retrieval(RECORDS, [*RECORDS, 5]),
    lambda p: vltools.match(RECORDS, p / "caps.jsonl", p / "m.pt"),
    lambda p: vltools.encode(p / "caps.jsonl", RECORDS, p / "o.h5"),
    lambda p: vltools.convert(RECORDS, p / "x.json"),
    lambda p: vltools.train("vse", [{"ids": RECORDS}, RECORDS], p / "m.pt"),     # features whose ids are records
    lambda p: vltools.train("vse", [p / "f.h5"], p / "m.pt", set={"train.epochs": RECORDS}),
    lambda p: vltools.search(RECORDS, p / "index.h5"),
    lambda p: vltools.score_caption(json.dumps(RECORDS), p / "refs.jsonl"),     # the text of a file, not its path
    lambda p: vltools.caption(p / "m.pt", RECORDS),
    lambda p: vltools.report(p / "site", rankings=RECORDS, boxes=RECORDS),
    lambda p: vltools.score_semantic(RECORDS, RECORDS),
    lambda p: vltools.score_self_retrieval(RECORDS),
    lambda p: vltools.extract_regions(RECORDS, p / "f.h5"),
    lambda p: vltools.load_model(RECORDS),
    lambda p: vltools.match({"ids": [r["image_id"] for r in RECORDS], "regions": RECORDS}, RECORDS, p / "m.pt"),
], ids=["score_caption", "score_retrieval", "match", "encode", "convert", "train", "train-set", "search", "text",
        "caption", "report", "score_semantic", "score_self_retrieval", "extract_regions", "load_model", "features"])
def test_an_error_quotes_a_huge_argument_shortly(tmp_path, call):
    """The refusal of a records list once repeated all of it: a 'one-line' message of about 560 KB."""
    with pytest.raises(VLToolsError) as error:
        call(tmp_path)
    message = str(error.value)
    assert len(message) < 300 and "\n" not in message, message
    assert ("'caption': 'a man riding a horse" in message or "a text of 467780" in message   # what it was
            or "[{'image_id': '0', 'caption': 'a man riding a horse" in message
            or message.startswith("predictions[5000]: no string 'caption'")), message        # which record


def test_report_writes_the_cards_the_stage_writes(world, tmp_path):
    features, captions, _, vse = world
    run("match", "--model", vse, features, captions, "--device", "cpu", "-o", tmp_path / "r.jsonl")
    counts = vltools.report(tmp_path / "api", rankings=tmp_path / "r.jsonl", captions=captions, sample=3,
                                  seed=1)
    run("report", tmp_path / "cli", "--rankings", tmp_path / "r.jsonl", "--captions", captions, "--sample", 3,
        "--seed", 1)
    cards = sorted(p.relative_to(tmp_path / "cli") for p in (tmp_path / "cli" / "data").rglob("*.js")
                   if p.name != "summary.js")
    assert cards and cards == sorted(p.relative_to(tmp_path / "api") for p in (tmp_path / "api" / "data").rglob("*.js")
                                     if p.name != "summary.js")
    for card in cards:     # summary.js holds the provenance (times, paths); the cards must be the same
        assert (tmp_path / "api" / card).read_bytes() == (tmp_path / "cli" / card).read_bytes()
    assert counts["cards"] == 6     # 3 sampled queries each way


def test_report_takes_matches_records_and_scores_in_memory(world, tmp_path):
    features, captions, _, vse = world
    found = vltools.match(features, captions, vse, device="cpu")
    write_records(tmp_path / "rankings.jsonl", found.rankings())
    scores = vltools.score_retrieval(found)
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    from_files = vltools.report(tmp_path / "files", rankings=tmp_path / "rankings.jsonl", captions=captions,
                                scores=tmp_path / "scores.json", sample=3, seed=1)
    from_memory = vltools.report(tmp_path / "memory", rankings=found, captions=lines(captions), scores=[scores],
                                 sample=3, seed=1)
    assert from_memory == from_files and from_files["cards"] == 6
    cards = sorted(p.relative_to(tmp_path / "files") for p in (tmp_path / "files" / "data").rglob("*.js")
                   if p.name != "summary.js")
    assert cards == sorted(p.relative_to(tmp_path / "memory") for p in (tmp_path / "memory" / "data").rglob("*.js")
                           if p.name != "summary.js")
    for card in cards:
        assert (tmp_path / "memory" / card).read_bytes() == (tmp_path / "files" / card).read_bytes()


@pytest.mark.parametrize(("options", "message"), [
    ({}, "rankings or generated, scores, logs or figures must be given: nothing to show"),
    ({"rankings": 5}, "rankings must be a file path or records (a non-empty list of dicts) in memory, not 5"),
    ({"scores": "s.json", "sample": -1}, "sample must be a non-negative integer, not -1"),
    ({"scores": "s.json", "seed": 2**40}, "seed must be an integer from 0 to 4294967295, not 1099511627776"),
    ({"scores": "s.json", "thumb_size": 8}, "thumb_size must be an integer >= 16, not 8"),
    ({"generated": [], "item_scores": ["i.jsonl"]}, "item_scores takes at most one file per generated file"),
])
def test_report_checks_its_arguments_before_any_work(tmp_path, options, message):
    with pytest.raises(VLToolsError) as error:
        vltools.report(tmp_path / "out", **options)
    assert str(error.value).startswith(message)
    assert list(tmp_path.iterdir()) == []


def test_score_semantic_and_self_retrieval_give_what_their_stages_print(tmp_path):
    from vltools.io.logp import write_logp
    from vltools.io.sims import write_sims

    ids = [f"im{i}" for i in range(6)]
    captions = tmp_path / "caps.jsonl"
    captions.write_text("".join(json.dumps({"image_id": i, "caption": text, "split": "test"}) + "\n" for i, text in
                                zip(ids, ["a red circle", "a red square", "a blue circle", "a green star",
                                          "a red circle and a star", "a blue square"], strict=True)))
    run("tfidf-proxy", captions, "--train-split", "test", "--k", "2", "-o", tmp_path / "proxy.h5")
    triplets = tmp_path / "t.jsonl"
    triplets.write_text(json.dumps({"query": "im0", "a": "im4", "b": "im5", "o1": 3, "o2": 1, "o3": 0}) + "\n")
    write_sims(tmp_path / "s.h5", np.random.default_rng(0).random((6, 6)), ids, ids)
    for model in (tmp_path / "s.h5", tmp_path / "proxy.h5"):
        found = vltools.score_semantic(model, tmp_path / "proxy.h5", triplets, r_values=[1, 2, 5])
        assert printed(found) == json.loads(run("score", "semantic", model, "--proxy", tmp_path / "proxy.h5",
                                                "--triplets", triplets, "--R", "1,2,5"))
    from_memory = vltools.score_semantic(tmp_path / "s.h5", tmp_path / "proxy.h5", lines(triplets), r_values=[1, 2, 5])
    assert from_memory == vltools.score_semantic(tmp_path / "s.h5", tmp_path / "proxy.h5", triplets, r_values=[1, 2, 5])
    from index_helpers import save, unit

    save(tmp_path / "emb.h5", "im", unit(np.random.default_rng(1).normal(size=(6, 4))), "images")
    found = vltools.match(tmp_path / "emb.h5", tmp_path / "emb.h5", top_k=4, device="cpu")      # i2i
    write_records(tmp_path / "i2i.jsonl", found.rankings())
    assert vltools.score_semantic(found, tmp_path / "proxy.h5", r_values=[1, 2]) == \
        vltools.score_semantic(tmp_path / "i2i.jsonl", tmp_path / "proxy.h5", r_values=[1, 2])
    write_logp(tmp_path / "logp.h5", np.array([[-1.0, -2.0, -3.0], [-5.0, -4.0, -0.5]]), ["a", "b", "c"], ["a", "b"])
    assert printed(vltools.score_self_retrieval(tmp_path / "logp.h5", [1, 2])) == json.loads(
        run("score", "self-retrieval", tmp_path / "logp.h5", "--k", "1,2"))


@pytest.mark.parametrize(("call", "message"), [
    (lambda: vltools.score_semantic("s.h5"), "give a proxy for NDCG / PCC, user-study triplets"),
    (lambda: vltools.score_semantic("s.h5", "p.h5", r_values="1,2"), "r_values must be a list of integers"),
    (lambda: vltools.score_semantic("s.h5", "p.h5", r_values=[0]), "r_values must be a positive integer, not 0"),
    (lambda: vltools.score_semantic(5, "p.h5"), "model must be a file path"),
    (lambda: vltools.score_semantic("s.h5", "p.h5", queries=-1), "queries must be a positive integer"),
    (lambda: vltools.score_self_retrieval("l.h5", []), "ks must be a non-empty list of integers"),
    (lambda: vltools.score_self_retrieval("l.h5", [1.5]), "ks must be a positive integer, not 1.5"),
])
def test_the_semantic_and_self_retrieval_scorers_check_their_arguments(call, message):
    with pytest.raises(VLToolsError, match=message):
        call()


def test_region_and_index_errors_name_python_arguments_not_options(tmp_path):
    """These library messages spelled --regions, --global, --min-regions, --index-file to Python callers; a saved
    index with a second input was refused as '--sims needs every pair scored', an option the API does not have."""
    photos = Path(__file__).parent / "data" / "photos"
    common = {"backbone": "resnet18", "weights": "none", "workers": 0, "device": "cpu", "detector_weights": "none"}
    calls = {
        lambda: vltools.extract_regions(photos, tmp_path / "a.h5", regions="none", **common):
            "^regions=none needs a global_pool mode",
        lambda: vltools.extract_regions(photos, tmp_path / "b.h5", num_regions=None, min_regions=9, max_regions=3,
                                        **common): "^min_regions=9 max_regions=3: need 1 <= min <= max",
    }
    if importlib.util.find_spec("faiss") is not None:
        from index_helpers import save, unit

        rng = np.random.default_rng(0)
        save(tmp_path / "imgs.h5", "i", unit(rng.normal(size=(20, 8))), "images")
        save(tmp_path / "caps.h5", "c", unit(rng.normal(size=(6, 8))), "captions")
        run("index", tmp_path / "imgs.h5", "-o", tmp_path / "g.h5")
        calls[lambda: vltools.match(tmp_path / "caps.h5", tmp_path / "imgs.h5", index_file=tmp_path / "g.h5")] = \
            re.escape(f"index_file={tmp_path / 'g.h5'} is searched by the queries alone; drop "
                      f"{tmp_path / 'imgs.h5'}, or match the two embeddings files without index_file")
    for call, message in calls.items():
        with pytest.raises(VLToolsError, match=message) as error:
            call()
        assert "--" not in str(error.value)


def test_embeddings_in_memory_with_a_duplicate_id_are_refused_as_files_refuse_them():
    # once matched: the first image's row ranked under 'a' twice, the third's gone
    vectors = np.eye(3, dtype=np.float32)
    images = vltools.Embeddings(["a", "b", "a"], vectors, "images", attrs={"checkpoint_digest": "d"})
    captions = vltools.Embeddings(["c0", "c1", "c2"], vectors, "captions", ["a", "b", "a"], {"checkpoint_digest": "d"})
    with pytest.raises(VLToolsError, match=r"^first \.ids: duplicate id 'a' \(rows 0 and 2\); ids must be unique$"):
        vltools.match(images, captions, device="cpu")


def test_embeddings_in_memory_are_checked_where_they_enter_naming_the_argument():
    vectors = np.eye(3, dtype=np.float32)
    captions = vltools.Embeddings(["c0", "c1", "c2"], vectors, "captions", ["a", "b", "c"], {"checkpoint_digest": "d"})
    meta = vltools.Embeddings(["a", "b", "c"], torch.zeros((3, 3), device="meta"), "images")
    with pytest.raises(VLToolsError, match=r"^first \.vectors is a tensor on the meta device, which holds no values"):
        vltools.match(meta, captions, device="cpu")
    escape = vltools.Embeddings(["a", "b\x1b[2J", "c"], vectors, "images", attrs={"checkpoint_digest": "d"})
    with pytest.raises(VLToolsError, match=r"^first \.ids\[1\] 'b\\x1b\[2J' holds the control character '\\x1b'"):
        vltools.match(escape, captions, device="cpu")
    images = vltools.Embeddings(np.array(["a", "b", "c"]), vectors, "images", attrs={"checkpoint_digest": "d"})
    with pytest.raises(VLToolsError, match=r"^second \.attrs\['checkpoint_digest'\] must be a string without NUL, "):
        vltools.match(images, vltools.Embeddings(["c0"], vectors[:1], "captions", ["a"], {"checkpoint_digest": {1}}),
                      device="cpu")
    assert vltools.match(images, captions, device="cpu").row_ids == ["a", "b", "c"]


@pytest.mark.parametrize("name", [name for name in vltools.API if name[0].islower()])
def test_every_function_answers_an_unknown_keyword_with_one_error_naming_it(name, tmp_path):
    # those without **options once answered with Python's TypeError: search(topk=3)
    required = {"convert": ("coco", tmp_path / "x.json"), "extract_regions": ([tmp_path], tmp_path / "o.h5")}
    with pytest.raises(VLToolsError, match=rf"^no_such is not an argument of vltools\.{name}; "):
        getattr(vltools, name)(*required.get(name, ()), no_such=1)
    assert not list(tmp_path.iterdir())


def test_a_misspelt_keyword_is_named_with_the_one_meant():
    with pytest.raises(VLToolsError, match=r"^topk is not an argument of vltools\.search; did you mean top_k\?$"):
        vltools.search("q.h5", "index.h5", topk=3)
    with pytest.raises(VLToolsError, match=r"^tokenised is not an argument of vltools\.score_caption; did you mean "):
        vltools.score_caption([{"image_id": "a", "caption": "x"}], [{"image_id": "a", "caption": "x"}], tokenised=True)
    with pytest.raises(VLToolsError, match=r"^batchsize is not an argument of vltools\.encode; did you mean batch_"):
        vltools.encode("c.jsonl", "m.pt", batchsize=3)


def test_train_refuses_standard_output_before_any_work(tmp_path, monkeypatch):
    # once a file named '-' (with -.last.pt and -.log.jsonl beside it)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(VLToolsError, match=r"^output cannot be '-' \(standard output\): train writes a checkpoint "):
        vltools.train("vse", [{"ids": ["a"], "regions": np.zeros((1, 2, 2))}, "caps.jsonl"], "-")
    assert not list(tmp_path.iterdir())
