"""`vltools synth-backbone` from the command line: a world in, a weights file that extract-regions loads out and
records, one log line with the validation accuracies; a folder that is no world exits 1 with one line, and a bad
option is a usage error (exit 2) before any work."""

from __future__ import annotations

import h5py
import pytest

from vltools.synth.world import WorldOptions, write_world


@pytest.mark.slow  # trains a backbone: minutes on 2 cores
def test_trains_weights_that_extract_regions_loads_and_records(tmp_path, vltools_cmd):
    world = tmp_path / "world"
    write_world(world, WorldOptions(images=20, pairs=0, aux_images=10, size=48))
    weights = tmp_path / "synth_resnet18.pt"
    result = vltools_cmd("synth-backbone", world, "--epochs", "1", "--image-size", "32", "--device", "cpu",
                         "-o", weights)
    assert result.returncode == 0, result.stderr
    last = result.stderr.decode().strip().splitlines()[-1]
    assert last.startswith(f"vltools: synth-backbone: wrote {weights} (resnet18); validation accuracy shape ")
    assert all(f"{name} " in last for name in ("colour", "size", "position"))
    features = tmp_path / "feats.h5"
    result = vltools_cmd("extract-regions", world / "images.jsonl", "--regions", "grid", "--backbone", "resnet18",
                         "--weights", weights, "--image-size", "64", "--workers", "0", "-o", features)
    assert result.returncode == 0, result.stderr
    with h5py.File(features) as handle:
        assert "synth_resnet18.pt (sha256 " in handle.attrs["weights"]


def test_a_folder_that_is_no_world_exits_1_and_bad_options_exit_2(tmp_path, vltools_cmd):
    result = vltools_cmd("synth-backbone", tmp_path, "-o", tmp_path / "w.pt")
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1 and "not a synthetic world" in lines[0], lines
    for option, value in (("--image-size", "16"), ("--epochs", "0"), ("--lr", "0"), ("--backbone", "alexnet")):
        result = vltools_cmd("synth-backbone", tmp_path, option, value, "-o", tmp_path / "w.pt")
        assert result.returncode == 2 and option in result.stderr.decode(), (option, result.stderr)
    assert not (tmp_path / "w.pt").exists()
