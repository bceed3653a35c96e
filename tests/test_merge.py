"""`vltools merge`: joins shard files in the given order, to a file or standard output; refuses mismatches."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

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
    assert attrs["backbone"] == "resnet18" and "shard" not in attrs and "a.h5" in attrs["merged_from"]
    assert attrs["num_failed"] == 2
    assert FeaturesReader(tmp_path / "all.h5").failed == ["x.jpg\tempty file (0 bytes)",
                                                "y.jpg\tnot an image file Pillow can read"]


def test_merge_to_standard_output_through_a_pipe(tmp_path):
    _write(tmp_path / "a.h5", ["1"])
    _write(tmp_path / "b.h5", ["2"])
    result = subprocess.run([sys.executable, "-m", "vltools", "merge", tmp_path / "a.h5", tmp_path / "b.h5"],
                            capture_output=True, timeout=120)
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
