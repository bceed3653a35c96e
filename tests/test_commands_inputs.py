"""The input files of every stage, checked before it runs: a file of the wrong kind, two inputs swapped and a
misspelt --device are refused in one line before torch loads; HDF5 comes through standard input (`-`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import h5py
import pytest
from click.testing import CliRunner
from matching_helpers import make_world, save_tiny
from pipeline_fixtures import HANG_GUARD_S, run_process

from vltools.cli import guard_outputs

# runs the CLI in a fresh interpreter and prints its exit status, standard error and whether torch got loaded
IN_FRESH_PYTHON = """
import contextlib, io, json, sys
from vltools.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        main(sys.argv[1:])
        code = 0
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "err": err.getvalue(), "torch": "torch" in sys.modules}))
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    features, captions = make_world(folder, n_images=4, per_image=2)
    return features, captions, save_tiny(folder / "vse.pt", "vse")


def fresh(*args: object, cwd: Path) -> dict:
    result = run_process([sys.executable, "-c", IN_FRESH_PYTHON, *map(str, args)], capture_output=True, cwd=cwd)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_swapped_inputs_are_named_before_torch_loads(world):
    """`match caps.jsonl feats.h5` once said, after 12.8 s of loading torch, that the captions were "not a readable
    HDF5 file ... may be truncated, rerun the stage that wrote it"."""
    features, captions, vse = world
    folder = features.parent
    said = fresh("match", "--model", vse.name, captions.name, features.name, cwd=folder)
    assert said == {"code": 1, "torch": False, "err": (
        f"vltools: error: {captions.name} and {features.name} are in each other's places: {captions.name} is JSON "
        f"text, which [CAPS.jsonl|CAP_EMB.h5|SIMS.h5] takes, and {features.name} is HDF5, which "
        "FEATS.h5|IMG_EMB.h5|SIMS.h5|IMAGES/ takes; swap them\n")}
    said = fresh("match", "--model", features.name, vse.name, captions.name, cwd=folder)
    assert said["code"] == 1 and not said["torch"]
    assert said["err"] == (f"vltools: error: {vse.name} and {features.name} are in each other's places: {vse.name} "
                           f"is a torch checkpoint, which --model takes, and {features.name} is HDF5, which "
                           "FEATS.h5|IMG_EMB.h5|SIMS.h5|IMAGES/ takes; swap them\n")


def test_a_file_of_the_wrong_kind_and_a_missing_one_are_refused_before_torch_loads(world):
    features, captions, vse = world
    folder = features.parent
    said = fresh("match", "--model", vse.name, features.name, vse.name, cwd=folder)
    assert said == {"code": 1, "torch": False, "err": (
        f"vltools: error: {vse.name}: [CAPS.jsonl|CAP_EMB.h5|SIMS.h5] must be JSON lines or HDF5, but this is a "
        "torch checkpoint; see `vltools match --help`\n")}
    said = fresh("encode", "--model", captions.name, features.name, cwd=folder)
    assert said["code"] == 1 and not said["torch"]
    assert said["err"] == (f"vltools: error: {captions.name}: --model must be a torch checkpoint, but this is JSON "
                           "text; see `vltools encode --help`\n")
    said = fresh("index", "absent.h5", "-o", "index.h5", cwd=folder)
    assert said == {"code": 1, "torch": False, "err": "vltools: error: absent.h5: no such file\n"}
    assert not (folder / "index.h5").exists()


def test_the_inputs_of_train_and_of_the_image_stages_are_checked_before_torch_loads(world):
    """Their inputs were plain paths: a checkpoint given as training data, or features given as images, failed only
    after torch had loaded, in the reader's words."""
    features, captions, vse = world
    folder = features.parent
    said = fresh("train", "--model", "vse", vse.name, captions.name, "-o", "new.pt", cwd=folder)
    assert said == {"code": 1, "torch": False, "err": (
        f"vltools: error: {vse.name}: INPUTS must be HDF5 or JSON lines or images (a folder, image files, a tar, a "
        "text list, an images JSONL or a Hugging Face dataset), but this is a torch checkpoint; see `vltools train "
        "--help`\n")}
    said = fresh("train", "--model", "vse", features.name, captions.name, "--init", captions.name, "-o", "new.pt",
                 cwd=folder)
    assert said["code"] == 1 and not said["torch"]
    assert said["err"].startswith(f"vltools: error: {captions.name}: --init must be a torch checkpoint, but this is")
    for stage in ("extract-regions", "segment-pool"):
        said = fresh(stage, features.name, "-o", "out.h5", cwd=folder)
        assert said["code"] == 1 and not said["torch"]
        assert said["err"].startswith(f"vltools: error: {features.name}: INPUTS must be images (a folder, ")
        assert said["err"].endswith(f"but this is HDF5; see `vltools {stage} --help`\n")
    said = fresh("concept-scores", "--model", features.name, vse.name, "-o", "out.h5", cwd=folder)
    assert said["code"] == 1 and not said["torch"]
    assert said["err"].startswith(f"vltools: error: {vse.name}: INPUTS must be images") and "torch checkpoint" in \
        said["err"]
    said = fresh("concept-scores", "--model", features.name, folder, "-o", "out.h5", cwd=folder)
    assert said["code"] == 1 and not said["torch"]
    assert said["err"] == (f"vltools: error: {features.name}: --model must be a torch checkpoint, but this is HDF5; "
                           "see `vltools concept-scores --help`\n")
    assert not (folder / "new.pt").exists() and not (folder / "out.h5").exists()


def test_an_unknown_model_name_is_refused_before_torch_loads_and_before_standard_input_is_read(world):
    """`extract-regions ... | match --model NAME - caps.jsonl` with a name the store does not hold said so only
    after the whole extraction had been read from the pipe."""
    features, captions, _ = world
    said = fresh("match", "--model", "nosuch", "-", captions.name, cwd=features.parent)
    assert said["code"] == 1 and not said["torch"]
    assert said["err"].startswith("vltools: error: --model nosuch: neither a checkpoint file nor a model in the store")
    assert "read HDF5 from standard input" not in said["err"]


def test_a_vltools_hdf5_file_of_another_kind_is_refused_before_torch_loads(world):
    """`search feats.h5` once said so only after torch had loaded (about 5.5 s); the first bytes say only HDF5, the
    file's declared kind says which."""
    features, _, vse = world
    folder = features.parent
    said = fresh("search", features.name, "--model", vse.name, "-q", "a red cube", cwd=folder)
    assert said == {"code": 1, "torch": False, "err": (
        f"vltools: error: {features.name}: INDEX.h5|IMG_EMB.h5 takes a vltools index or embeddings file, but this "
        "is a vltools features file; see `vltools search --help`\n")}
    said = fresh("index", features.name, "-o", "index.h5", cwd=folder)
    assert said["code"] == 1 and not said["torch"] and not (folder / "index.h5").exists()
    assert said["err"].startswith(f"vltools: error: {features.name}: EMB.h5 takes a vltools embeddings file, but ")


def test_a_misspelt_device_is_a_usage_error_before_torch_loads(world):
    """`--device gpu` once took 11 s and exited 1."""
    features, captions, vse = world
    said = fresh("match", "--model", vse.name, "--device", "gpu", features.name, captions.name, cwd=features.parent)
    assert said["code"] == 2 and not said["torch"]
    assert said["err"].splitlines()[-1] == ("Error: Invalid value for '--device': must be auto, cpu, cuda or cuda:K "
                                            "(K: a GPU's index), not 'gpu'")


def test_hdf5_is_read_from_a_pipe_as_from_its_file(world, vltools_cmd):
    """`extract-regions ... | vltools match --model vse.pt - caps.jsonl` once failed with "-: no such file"."""
    features, captions, vse = world
    from_file = vltools_cmd("--quiet", "match", "--model", vse, features, captions, check=True)
    piped = vltools_cmd("--quiet", "match", "--model", vse, "-", captions, stdin=features.read_bytes(), check=True)
    assert piped.stdout == from_file.stdout and from_file.stdout.count(b"\n") == 4 + 8


def test_what_standard_input_carries_is_checked_like_a_file(world, vltools_cmd):
    features, captions, vse = world
    swapped = vltools_cmd("match", "--model", vse, "-", features, stdin=captions.read_bytes())
    assert swapped.returncode == 1 and swapped.stderr.decode() == (
        f"vltools: error: standard input (-) and {features} are in each other's places: standard input (-) is JSON "
        "text, which [CAPS.jsonl|CAP_EMB.h5|SIMS.h5] takes, and "
        f"{features} is HDF5, which FEATS.h5|IMG_EMB.h5|SIMS.h5|IMAGES/ takes; swap them\n")
    wrong = vltools_cmd("index", "-", "-o", features.parent / "index.h5", stdin=captions.read_bytes())
    assert wrong.returncode == 1 and wrong.stderr.decode() == (
        "vltools: error: standard input (-): EMB.h5 must be HDF5, but this is JSON text; see `vltools index --help`\n")


@pytest.mark.parametrize("args, problem", [
    (["encode", "--model", "m.pt", "c.jsonl", "--captions", "-"],
     "Invalid value for '--captions': standard input (-) is not read here; give JSON lines as a file"),
])
def test_standard_input_where_it_is_not_read_is_a_usage_error(tmp_path, args, problem):
    said = fresh(*args, cwd=tmp_path)
    assert said["code"] == 2 and not said["torch"] and said["err"].splitlines()[-1] == f"Error: {problem}"


def test_one_standard_input_feeds_one_input(world):
    features, captions, vse = world
    said = fresh("match", "--model", vse.name, "-", "-", cwd=features.parent)
    assert said == {"code": 1, "torch": False, "err": (
        "vltools: error: standard input (-) is given to FEATS.h5|IMG_EMB.h5|SIMS.h5|IMAGES/ and "
        "[CAPS.jsonl|CAP_EMB.h5|SIMS.h5]; it can feed one input only, give the others as files\n")}


def test_the_copy_of_standard_input_is_a_temporary_file_removed_when_the_stage_ends(world):
    from vltools.commands.inputs import InputFile

    features, _, _ = world
    seen = {}

    @click.command()
    @click.argument("source", type=InputFile("hdf5"))
    def stage(source: str) -> None:
        seen["path"] = Path(source)
        with h5py.File(source, "r") as handle:
            seen["datasets"] = sorted(handle)

    result = CliRunner().invoke(guard_outputs(stage), ["-"], input=features.read_bytes())
    assert result.exit_code == 0, result.output
    with h5py.File(features, "r") as handle:
        assert seen["datasets"] == sorted(handle)
    assert seen["path"].name == "stdin.h5" and not seen["path"].exists() and not seen["path"].parent.exists()


def test_a_stage_writing_hdf5_feeds_one_reading_it(world, tmp_path):
    """The pipe of two real processes: encode writes embeddings to standard output, index reads them."""
    features, _, vse = world
    command = [sys.executable, "-m", "vltools", "--quiet"]
    producer = subprocess.Popen([*command, "encode", "--model", str(vse), str(features)], stdout=subprocess.PIPE)
    consumer = run_process([*command, "index", "-", "-o", str(tmp_path / "index.h5")], stdin=producer.stdout,
                           capture_output=True)
    producer.stdout.close()
    assert producer.wait(timeout=HANG_GUARD_S) == 0 and consumer.returncode == 0, consumer.stderr.decode()
    with h5py.File(tmp_path / "index.h5", "r") as handle:
        assert handle.attrs["format"] == "vltools.index"
