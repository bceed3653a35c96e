"""The inference settings the command line reads in --help: `--shard i/n` parsing, and no torch on import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vltools.errors import ArgumentError, VLToolsError
from vltools.infer.settings import RunOptions, locked_part, parse_shard, process_part


def test_parse_shard_reads_i_over_n_and_refuses_the_rest():
    assert parse_shard("2/4") == (2, 4)
    assert parse_shard("0/1") == (0, 1)
    assert parse_shard(None) is None
    for bad in ("4/4", "a/b", "1", "0/0", "-1/3", "1/2/3"):
        with pytest.raises(ArgumentError, match=f"^shard '{bad}'"):
            parse_shard(bad)


def test_the_settings_and_the_device_choices_load_without_torch():
    code = ("import sys, vltools.infer.settings, vltools.devices, vltools.vision.limits; "
            "print(sorted(m for m in ('torch', 'torchvision', 'numpy') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(("options", "message"), [
    ({"workers": -3}, "workers must be a non-negative integer, not -3"),
    ({"batch_size": 0}, "batch_size must be a positive integer, not 0"),
    ({"precision": "fp64"}, "precision must be one of fp32, tf32, bf16, fp16, not 'fp64'"),
    ({"max_pixels": 2**40}, "max_pixels must be an integer from 1 to 268435456"),
    ({"seed": -1}, "seed must be an integer from 0 to 4294967295, not -1"),
    ({"strict": "yes"}, "strict must be True or False, not 'yes'"),
])
def test_run_options_check_each_value_when_made(options, message):
    with pytest.raises(VLToolsError, match=message):
        RunOptions(**options)
    assert RunOptions(workers=0).workers == 0


def test_a_part_goes_in_its_folder_under_torchrun_and_standard_output_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with locked_part(tmp_path / "feats", None, "h5") as (target, part):
        assert target == str(tmp_path / "feats" / "part-00001-of-00002.h5") and part.whole == "0/1"
        assert (tmp_path / "feats" / "part-00001-of-00002.h5.lock").exists()     # each process locks its own part
    with pytest.raises(VLToolsError, match="under torchrun each process writes its own part: give -o FOLDER"):
        process_part(None, "-")
    assert process_part(None, None).index == 1       # in memory: each process keeps its part


def test_a_failed_run_removes_the_folder_it_made_while_it_is_empty(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(RuntimeError), locked_part(tmp_path / "feats", None, "h5"):
        raise RuntimeError("the model failed")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_given_to_a_run_of_one_output_is_refused_before_any_work(tmp_path):
    with pytest.raises(VLToolsError, match=r"is a folder; give -o a file, or --shard I/N \(or torchrun\)"), \
            locked_part(tmp_path, None, "h5"):
        pytest.fail("the run started")
    with locked_part(f"{tmp_path}/set/", "1/3", "jsonl") as (target, part):
        assert target == str(tmp_path / "set" / "part-00001-of-00003.jsonl") and part.in_folder
    with locked_part(tmp_path / "one.jsonl", "1/3", "jsonl") as (target, part):
        assert target == str(tmp_path / "one.jsonl") and not part.in_folder
