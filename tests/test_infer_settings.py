"""The inference settings the command line reads in --help: `--shard i/n` parsing, and no torch on import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vltools.errors import ArgumentError, VLToolsError
from vltools.infer.settings import RunOptions, parse_shard


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
