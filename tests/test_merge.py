"""`vltools merge`: joins shard files in the given order, to a file or standard output; refuses mismatches."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from pipeline_fixtures import run_process

from vltools.cli import main
from vltools.io.features import FeaturesReader, FeaturesWriter

ATTRS = {"backbone": "resnet18", "weights": "none", "regions": "grid", "image_size": 64}


def _write(path, ids, attrs=ATTRS, failed=(), seed=0):
    regions = np.random.default_rng(seed).standard_normal((len(ids), 3, 4)).astype(np.float32)
    with FeaturesWriter(path, {**attrs, "shard": "0/2"}) as writer:
        writer.add(ids, regions=regions)
        writer.set_failed(list(failed))
    return regions.astype(np.float16)


def _exit(*args) -> int:
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_merge_to_a_file_keeps_rows_failed_and_provenance(tmp_path):
    a = _write(tmp_path / "a.h5", ["1", "3"], failed=["x.jpg\tempty file (0 bytes)"], seed=1)
    b = _write(tmp_path / "b.h5", ["2"], failed=["y.jpg\tnot an image file Pillow can read"], seed=2)
    assert _exit("-q", "merge", tmp_path / "a.h5", tmp_path / "b.h5", "-o", tmp_path / "all.h5") == 0
    with FeaturesReader(tmp_path / "all.h5") as merged:
        assert merged.ids == ["1", "3", "2"]
        assert np.array_equal(merged.read(["1", "3", "2"])["regions"], np.concatenate([a, b]))
        attrs = merged.attrs
    assert attrs["backbone"] == "resnet18" and "shard" not in attrs
    assert [part["file"] for part in json.loads(attrs["parts"])] == ["a.h5", "b.h5"]
    assert attrs["num_failed"] == 2
    assert FeaturesReader(tmp_path / "all.h5").failed == ["x.jpg\tempty file (0 bytes)",
                                                "y.jpg\tnot an image file Pillow can read"]


def test_merge_to_standard_output_through_a_pipe(tmp_path):
    _write(tmp_path / "a.h5", ["1"])
    _write(tmp_path / "b.h5", ["2"])
    result = run_process([sys.executable, "-m", "vltools", "merge", tmp_path / "a.h5", tmp_path / "b.h5"],
                         capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
    (tmp_path / "piped.h5").write_bytes(result.stdout)
    with FeaturesReader(tmp_path / "piped.h5") as merged:
        assert merged.ids == ["1", "2"]


def test_merge_refuses_a_file_made_differently_naming_it(tmp_path, capsys):
    _write(tmp_path / "a.h5", ["1"])
    _write(tmp_path / "vgg.h5", ["2"], attrs={**ATTRS, "backbone": "vgg19"})
    _write(tmp_path / "again.h5", ["1"])
    for other, what in (("vgg.h5", "'backbone'"), ("again.h5", "'1' is also in")):
        assert _exit("merge", tmp_path / "a.h5", tmp_path / other, "-o", tmp_path / "out.h5") == 1
        error = capsys.readouterr().err.strip()
        assert error.count("\n") == 0 and str(tmp_path / other) in error and what in error
        assert not (tmp_path / "out.h5").exists()


def _precomp_split(folder, split, images, dim=8, seed=0):
    """A precomp split as the SCAN / SGRAF data has it: {split}_ims.npy (N x 36 x dim) and {split}_caps.txt."""
    folder.mkdir(exist_ok=True)
    ims = np.random.default_rng(seed).standard_normal((images, 36, dim)).astype(np.float32)
    np.save(folder / f"{split}_ims.npy", ims)
    (folder / f"{split}_caps.txt").write_text("".join(f"a dog number {i} .\n" for i in range(5 * images)))
    return ims


def _convert(folder, split, out):
    assert _exit("-q", "convert", "precomp", folder, "--split", split, "--features", out) == 0
    return out


def test_merge_joins_the_converted_splits_of_one_precomp_folder_keeping_each_provenance(tmp_path):
    data = tmp_path / "f30k_precomp"
    train, dev = _precomp_split(data, "train", 3, seed=1), _precomp_split(data, "dev", 2, seed=2)
    parts = [_convert(data, split, tmp_path / f"{split}.h5") for split in ("train", "dev")]
    assert _exit("-q", "merge", *parts, "-o", tmp_path / "trainval.h5") == 0
    with FeaturesReader(tmp_path / "trainval.h5") as merged:
        ids = ["train_0", "train_1", "train_2", "dev_0", "dev_1"]
        assert merged.ids == ids
        assert np.array_equal(merged.read(ids)["regions"], np.concatenate([train, dev]))
        attrs = merged.attrs
    assert attrs["backbone"] == "precomp" and "source" not in attrs
    provenance = json.loads(attrs["parts"])
    assert [part["file"] for part in provenance] == ["train.h5", "dev.h5"]
    assert [Path(part["source"]).name for part in provenance] == ["train_ims.npy", "dev_ims.npy"]
    assert all(part["command"] and part["created"] and part["vltools_version"] for part in provenance)
    # a merged file merges again: the parts' provenance is carried, not nested
    _precomp_split(data, "test", 1, seed=3)
    _convert(data, "test", tmp_path / "test.h5")
    assert _exit("-q", "merge", tmp_path / "trainval.h5", tmp_path / "test.h5", "-o", tmp_path / "all.h5") == 0
    with FeaturesReader(tmp_path / "all.h5") as merged:
        assert [part["file"] for part in json.loads(merged.attrs["parts"])] == ["train.h5", "dev.h5", "test.h5"]


def test_merge_refuses_features_that_differ_in_what_they_are(tmp_path, capsys):
    _precomp_split(tmp_path / "a", "train", 2)
    _precomp_split(tmp_path / "b", "dev", 2, dim=4)
    train, dev = _convert(tmp_path / "a", "train", tmp_path / "train.h5"), _convert(tmp_path / "b", "dev",
                                                                                     tmp_path / "dev.h5")
    capsys.readouterr()
    assert _exit("merge", train, dev, "-o", tmp_path / "out.h5") == 1
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and str(dev) in error and "(36, 4)" in error and "(36, 8)" in error
    _write(tmp_path / "grid.h5", ["x"])
    assert _exit("merge", train, tmp_path / "grid.h5", "-o", tmp_path / "out.h5") == 1
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "grid.h5" in error and "'backbone'" in error
    assert not (tmp_path / "out.h5").exists()
