"""`vltools convert bottom-up` on Anderson / LXMERT TSVs and per-image .npz files built with known arrays."""

from __future__ import annotations

import base64

import h5py
import numpy as np
import pytest
from convert_cli import convert

from vltools.cli import main
from vltools.data.converters.bottom_up import ANDERSON_FIELDS, LXMERT_FIELDS, convert_bottom_up
from vltools.errors import VLToolsError

DIM = 32


def detections(counts: list[int], seed: int = 0) -> list[dict]:
    """Known detector outputs: image ids, sizes with h != w, float32 boxes and features."""
    rng = np.random.default_rng(seed)
    out = []
    for index, count in enumerate(counts):
        corners = rng.uniform(0, 300, size=(count, 2)).astype(np.float32)
        boxes = np.concatenate([corners, corners + rng.uniform(1, 100, size=(count, 2)).astype(np.float32)], 1)
        out.append({"image_id": str(391895 + index), "h": 480 + index, "w": 640 - index, "boxes": boxes,
                    "features": rng.standard_normal((count, DIM)).astype(np.float32)})
    return out


def b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()


def write_anderson_tsv(path, items: list[dict]) -> None:
    """One row per image in the original order: image_id, image_w, image_h, num_boxes, boxes, features."""
    path.write_text("".join("\t".join([d["image_id"], str(d["w"]), str(d["h"]), str(len(d["boxes"])), b64(d["boxes"]),
                                       b64(d["features"])]) + "\n" for d in items))


def check(path, items: list[dict], width: int, with_counts: bool) -> None:
    """The features file holds exactly the given arrays, zero padded to `width` rows."""
    with h5py.File(path) as handle:
        assert [i.decode() if isinstance(i, bytes) else i for i in handle["ids"][:]] == [d["image_id"] for d in items]
        assert handle["regions"].shape == (len(items), width, DIM)
        assert ("num_regions" in handle) == with_counts
        for row, d in enumerate(items):
            kept = min(len(d["boxes"]), width)
            np.testing.assert_array_equal(handle["regions"][row, :kept], d["features"][:kept])
            np.testing.assert_array_equal(handle["boxes"][row, :kept], d["boxes"][:kept])
            assert not handle["regions"][row, kept:].any() and not handle["boxes"][row, kept:].any()
            assert handle["image_size"][row].tolist() == [d["h"], d["w"]]
            if with_counts:
                assert handle["num_regions"][row] == kept
        assert handle.attrs["backbone"] == "bottom-up" and handle.attrs["regions"] == "detector"
        assert handle.attrs["weights"] == "unknown"


def test_anderson_tsv_with_varying_box_counts(tmp_path):
    items = detections([10, 36, 17])
    tsv, out = tmp_path / "trainval.tsv", tmp_path / "feats.h5"
    write_anderson_tsv(tsv, items)
    convert("bottom-up", tsv, "-o", out)
    check(out, items, 36, with_counts=True)


def test_several_tsv_files_and_max_regions(tmp_path):
    items = detections([10, 36, 17, 12])
    write_anderson_tsv(tmp_path / "a.tsv", items[:2])
    write_anderson_tsv(tmp_path / "b.tsv", items[2:])
    out = tmp_path / "feats.h5"
    convert("bottom-up", tmp_path / "a.tsv", tmp_path / "b.tsv", "--max-regions", "12", "-o", out)
    check(out, items, 12, with_counts=True)


def test_lxmert_fields_with_fixed_36_boxes(tmp_path):
    items = detections([36, 36])
    rows = []
    for d in items:
        objects = np.arange(36, dtype=np.int64)
        confidences = np.linspace(0.9, 0.1, 36, dtype=np.float32)
        rows.append("\t".join([f"COCO_val2014_{int(d['image_id']):012d}", str(d["h"]), str(d["w"]), b64(objects),
                               b64(confidences), b64(objects), b64(confidences), "36", b64(d["boxes"]),
                               b64(d["features"])]))
        d["image_id"] = f"COCO_val2014_{int(d['image_id']):012d}"
    tsv, out = tmp_path / "val2014_obj36.tsv", tmp_path / "feats.h5"
    tsv.write_text("\n".join(rows) + "\n")
    convert("bottom-up", tsv, "--fields", ",".join(LXMERT_FIELDS), "-o", out)
    check(out, items, 36, with_counts=False)


def test_npz_folder_in_both_orientations(tmp_path):
    items = detections([10, 20, 20])
    folder = tmp_path / "npz"
    folder.mkdir()
    for index, d in enumerate(items):
        x = d["features"].T if index == 1 else d["features"]
        np.savez_compressed(folder / f"{d['image_id']}.npz", x=x, bbox=d["boxes"], num_bbox=len(d["boxes"]),
                            image_h=d["h"], image_w=d["w"])
    out = tmp_path / "feats.h5"
    convert_bottom_up([folder], out)
    check(out, items, 20, with_counts=True)


def test_bad_base64_exits_1_naming_the_line(tmp_path, vltools_cmd):
    items = detections([10, 10])
    tsv = tmp_path / "x.tsv"
    write_anderson_tsv(tsv, items)
    lines = tsv.read_text().splitlines()
    cells = lines[1].split("\t")
    cells[5] = cells[5][:-7] + "!!!!!!!"
    lines[1] = "\t".join(cells)
    tsv.write_text("\n".join(lines) + "\n")
    result = vltools_cmd("convert", "bottom-up", tsv, "-o", tmp_path / "f.h5")
    assert result.returncode == 1
    assert "x.tsv: line 2: features is not valid base64" in result.stderr.decode()
    assert not (tmp_path / "f.h5").exists()


def test_wrong_fields_and_repeated_ids(tmp_path):
    items = detections([10, 10])
    tsv = tmp_path / "x.tsv"
    write_anderson_tsv(tsv, items)
    with pytest.raises(VLToolsError, match="x.tsv: line 1: 6 columns instead of 10"):
        convert_bottom_up([tsv], tmp_path / "f.h5", LXMERT_FIELDS)
    items[1]["image_id"] = items[0]["image_id"]
    write_anderson_tsv(tsv, items)
    with pytest.raises(VLToolsError, match="x.tsv: line 2: image id '391895' repeats"):
        convert_bottom_up([tsv], tmp_path / "f.h5", ANDERSON_FIELDS)


def test_fields_as_one_comma_separated_string_and_their_errors_per_interface(tmp_path, capsys):
    items = detections([3, 5])
    tsv, out = tmp_path / "x.tsv", tmp_path / "f.h5"
    write_anderson_tsv(tsv, items)
    assert convert_bottom_up([tsv], out, " image_id, image_w,image_h,num_boxes,boxes,features ") == {"images": 2}
    check(out, items, 5, with_counts=True)
    with pytest.raises(VLToolsError, match=r"^fields=image_id,boxes: needs exactly one of image_h / img_h$"):
        convert_bottom_up([tsv], tmp_path / "g.h5", "image_id,boxes")
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "bottom-up", str(tsv), "--fields", "image_id,boxes", "-o", str(tmp_path / "g.h5")])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.strip().endswith("--fields image_id,boxes: needs exactly one of image_h / img_h")
    assert not (tmp_path / "g.h5").exists()
