"""The streaming merge of features files: order, compatibility checks, duplicates, and how many files a merge
holds open."""

from __future__ import annotations

import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io import merge as merge_module
from vltools.io.features import FeaturesReader, FeaturesWriter
from vltools.io.merge import merge_features

ATTRS = {"backbone": "resnet18", "weights": "none", "regions": "grid", "image_size": 64}


def _rows(ids, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    return {"regions": rng.standard_normal((len(ids), 2, dim)).astype(np.float32),
            "image_size": rng.integers(1, 100, (len(ids), 2)).astype(np.int32)}


def _write(path, ids, attrs=ATTRS, dim=3, seed=0, failed=()):
    rows = _rows(ids, dim, seed)
    with FeaturesWriter(path, attrs, dtype="float32") as writer:
        writer.add(ids, **rows)
        writer.set_failed(list(failed))
    return rows


def test_merge_concatenates_in_given_order_and_keeps_failed(tmp_path):
    a = _write(tmp_path / "a.h5", ["x", "y"], seed=1, failed=["bad\tempty file"])
    b = _write(tmp_path / "b.h5", ["z"], seed=2)
    count = merge_features([tmp_path / "a.h5", tmp_path / "b.h5"], tmp_path / "m.h5", ATTRS,
                           failed=["bad\tempty file"])
    with FeaturesReader(tmp_path / "m.h5") as merged:
        assert count == 3 and merged.ids == ["x", "y", "z"]
        data = merged.read(["x", "y", "z"])
    assert np.array_equal(data["regions"], np.concatenate([a["regions"], b["regions"]]))
    assert FeaturesReader(tmp_path / "m.h5").failed == ["bad\tempty file"]


def test_merge_refuses_different_options_shapes_and_duplicate_ids(tmp_path):
    _write(tmp_path / "a.h5", ["x"])
    _write(tmp_path / "other_backbone.h5", ["y"], attrs={**ATTRS, "backbone": "resnet50"})
    _write(tmp_path / "other_dim.h5", ["y"], dim=4)
    _write(tmp_path / "dup.h5", ["x"])
    cases = [("other_backbone.h5", "backbone"), ("other_dim.h5", "/regions"), ("dup.h5", "'x' is also in")]
    for name, what in cases:
        with pytest.raises(VLToolsError, match=what) as info:
            merge_features([tmp_path / "a.h5", tmp_path / name], tmp_path / "m.h5", ATTRS)
        assert str(info.value).startswith(str(tmp_path / name))


def test_a_merge_of_many_parts_holds_few_files_open(tmp_path, monkeypatch):
    """A merge opened every part at once: past the open-files limit (1024 on many systems: 17 hours of 60-second
    parts) it failed, calling a part 'not a readable HDF5 file', and so did every --resume after it."""
    monkeypatch.setattr(merge_module, "MERGE_BLOCK", 3)
    opened, open_now, most = [], set(), [0]

    class Counted(FeaturesReader):
        def __init__(self, path):
            super().__init__(path)
            opened.append(path.name)
            open_now.add(id(self))
            most[0] = max(most[0], len(open_now))

        def close(self):
            open_now.discard(id(self))
            super().close()

    monkeypatch.setattr(merge_module, "FeaturesReader", Counted)
    sources, want = [], {}
    for number in range(5):
        ids = [f"p{number}r{row}" for row in range(2)]
        sources.append(tmp_path / f"part-{number:06d}.h5")
        want.update(zip(ids, _write(sources[-1], ids, seed=number)["regions"], strict=True))
    order = list(want)                                  # the sources' rows, one source after another
    assert merge_features(sources, tmp_path / "m.h5", ATTRS) == 10
    assert most[0] <= 2 and not open_now                # the reference file and the one being read
    with FeaturesReader(tmp_path / "m.h5") as merged:
        assert merged.ids == order
        assert np.array_equal(merged.read(order)["regions"], np.stack([want[i] for i in order]))


def test_a_shard_of_no_image_merges_by_its_options_alone(tmp_path):
    """A shard that got no batch (5 images in one batch of 8 cut in two) has no datasets: it merges with the
    others, whose datasets are still compared with each other."""
    with FeaturesWriter(tmp_path / "empty.h5", ATTRS, dtype="float32"):
        pass
    a = _write(tmp_path / "a.h5", ["x"], seed=1)
    _write(tmp_path / "b.h5", ["y"], seed=2)
    assert merge_features([tmp_path / "empty.h5", tmp_path / "a.h5", tmp_path / "b.h5"], tmp_path / "m.h5",
                          ATTRS) == 2
    with FeaturesReader(tmp_path / "m.h5") as merged:
        assert merged.ids == ["x", "y"] and np.array_equal(merged.read(["x"])["regions"], a["regions"])
    _write(tmp_path / "wide.h5", ["z"], dim=5)
    with pytest.raises(VLToolsError, match=r"wide.h5: /regions rows are \(2, 5\) float32 but .*a.h5 has"):
        merge_features([tmp_path / "empty.h5", tmp_path / "a.h5", tmp_path / "wide.h5"], tmp_path / "m2.h5", ATTRS)
    with FeaturesWriter(tmp_path / "other.h5", {**ATTRS, "backbone": "resnet50"}, dtype="float32"):
        pass
    with pytest.raises(VLToolsError, match="other.h5: attribute 'backbone' is 'resnet50'"):
        merge_features([tmp_path / "a.h5", tmp_path / "other.h5"], tmp_path / "m3.h5", ATTRS)
