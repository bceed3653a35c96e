"""`vltools convert hf` on tiny datasets in the layouts people download (tests/hf_helpers.py): images written once
as they are, ids, splits and caption ids kept, the same records `convert karpathy` gives the same data; bad layouts
refused in one line naming the row and the column; `extract-regions DATASET` gives the converted images' features."""

from __future__ import annotations

import json

import numpy as np
import pytest
from convert_cli import convert
from hf_helpers import captions, coco_karpathy, flickr, flickr_dict, flickr_rows, jpeg, per_caption

import vltools
from vltools.cli import main
from vltools.data.converters.hf import convert_hf
from vltools.errors import VLToolsError
from vltools.io.features import FeaturesReader


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_flickr30k_layout_becomes_images_and_captions_as_convert_karpathy_names_them(tmp_path):
    out = tmp_path / "f30k"
    convert("hf", flickr(tmp_path / "ds"), "-o", out)
    assert sorted(path.name for path in out.iterdir()) == ["captions.jsonl", "images", "images.jsonl"]
    assert _lines(out / "images.jsonl") == [
        {"image_id": f"{1000 + i}.jpg", "path": f"images/{1000 + i}.jpg", "split": split}
        for i, split in enumerate(["train", "train", "val", "test"])]
    for i in range(4):
        assert (out / "images" / f"{1000 + i}.jpg").read_bytes() == jpeg(i)     # the bytes as they were
    karpathy = tmp_path / "dataset_flickr30k.json"
    karpathy.write_text(json.dumps({"dataset": "flickr30k", "images": [
        {"filename": f"{1000 + i}.jpg", "imgid": i, "split": split, "sentids": [5 * i + k for k in range(5)],
         "sentences": [{"raw": text, "tokens": text.split(), "imgid": i, "sentid": 5 * i + k}
                       for k, text in enumerate(captions(i))]}
        for i, split in enumerate(["train", "train", "val", "test"])]}))
    convert("karpathy", karpathy, "-o", tmp_path / "karpathy.jsonl")
    assert _lines(out / "captions.jsonl") == _lines(tmp_path / "karpathy.jsonl")


def test_coco_karpathy_parquet_reads_its_images_under_the_image_root(tmp_path):
    parquet = coco_karpathy(tmp_path / "karpathy.parquet", tmp_path / "coco")
    out = tmp_path / "coco_out"
    convert("hf", parquet, "-o", out, "--image-root", tmp_path / "coco")
    images = _lines(out / "images.jsonl")
    assert [(r["image_id"], r["split"]) for r in images] == [
        ("COCO_train2014_000000000000.jpg", "train"), ("COCO_train2014_000000000001.jpg", "restval"),
        ("COCO_val2014_000000000002.jpg", "val"), ("COCO_val2014_000000000003.jpg", "test")]
    assert (out / "images" / "COCO_val2014_000000000002.jpg").read_bytes() == jpeg(12)
    caps = _lines(out / "captions.jsonl")
    assert len(caps) == 20 and caps[5] == {"image_id": "COCO_train2014_000000000001.jpg", "caption": captions(1)[0],
                                           "caption_id": "55", "split": "restval"}
    by_cocoid = convert_hf(parquet, tmp_path / "by_id", id_column="cocoid", image_root=tmp_path / "coco")
    assert by_cocoid == {"images": 4, "captions": 20}
    assert _lines(tmp_path / "by_id" / "images.jsonl")[0]["path"] == "images/100.jpg"   # the format's extension
    with pytest.raises(VLToolsError, match=r"karpathy.parquet: row 0, column 'filepath/filename': cannot read the "
                                           r"image file .*train2014/COCO_train2014_000000000000.jpg \(No such file or "
                                           r"directory\); give image_root, the folder its paths are under$"):
        convert_hf(parquet, tmp_path / "no_root")
    assert not (tmp_path / "no_root").exists()


def test_a_row_per_caption_writes_each_image_once_with_all_its_captions(tmp_path):
    out = tmp_path / "out"
    assert vltools.convert("hf", per_caption(tmp_path / "hub"), out) == {"images": 2, "captions": 6}
    assert [path.name for path in sorted((out / "images").iterdir())] == ["COCO_val2014_000000000000.jpg",
                                                                          "COCO_val2014_000000000001.jpg"]
    caps = _lines(out / "captions.jsonl")
    assert [(r["image_id"][-5:], r["caption_id"], r["split"]) for r in caps] == [
        ("0.jpg", "0", "train"), ("0.jpg", "1", "train"), ("0.jpg", "2", "train"),
        ("1.jpg", "10", "train"), ("1.jpg", "11", "train"), ("1.jpg", "12", "train")]


def test_a_dataset_dict_keeps_its_split_names(tmp_path):
    out = tmp_path / "out"
    convert("hf", flickr_dict(tmp_path / "dd"), "-o", out, "--image-column", "image", "--caption-column", "caption")
    assert [r["split"] for r in _lines(out / "images.jsonl")] == ["train", "train", "train", "test"]


def test_bad_layouts_are_one_line_naming_the_row_and_column(tmp_path):
    rows = flickr_rows(3)
    rows["image"][2] = {"bytes": b"GIF89a broken", "path": None}
    with pytest.raises(VLToolsError, match=r"bad: row 2, column 'image': the image does not decode \(.*\); fix or "
                                           r"drop that row$"):
        convert_hf(flickr(tmp_path / "bad", rows), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    hub = per_caption(tmp_path / "hub")
    with pytest.raises(VLToolsError, match=r"train-00000-of-00001.parquet: no column 'caption' for the captions; give "
                                           r"caption_column one of image, filepath"):
        convert_hf(hub, tmp_path / "out", caption_column="caption")
    with pytest.raises(VLToolsError, match=r"row 0, column 'sentids': holds \[0, 1, 2\] \(list<element: int32>\), not "
                                           r"a caption text"):
        convert_hf(hub, tmp_path / "out", caption_column="sentids")
    with pytest.raises(VLToolsError, match=r"parquet: row 0, column 'imgid': holds 0 \(int32\), not a split name; "
                                           r"give split_column a text column$"):
        convert_hf(hub, tmp_path / "out", split_column="imgid")


def test_rows_of_one_image_in_two_splits_are_refused_naming_both(tmp_path):
    rows = flickr_rows(3)
    rows["filename"][2] = rows["filename"][0]
    with pytest.raises(VLToolsError, match=r"twice: row 2: image '1000.jpg' is in split 'val' here but in 'train' on "
                                           r".*twice: row 0; give each image one split$"):
        convert_hf(flickr(tmp_path / "twice", rows), tmp_path / "out")


def test_an_existing_folder_is_replaced_only_with_force_and_only_when_it_is_a_conversion(tmp_path, vltools_cmd):
    folder = flickr(tmp_path / "ds")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = vltools_cmd("convert", "hf", str(folder), "-o", str(out))
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines() == [
        f"vltools: error: {out}: folder exists and is not empty; give a new folder, or --force to replace an earlier "
        "converted dataset"]
    (out / "notes.txt").unlink()
    convert("hf", folder, "-o", out)
    convert("hf", folder, "-o", out, "--force", "--id-column", "img_id")
    assert sorted(path.name for path in (out / "images").iterdir()) == ["0.jpg", "1.jpg", "2.jpg", "3.jpg"]


def test_extract_regions_reads_the_dataset_as_it_reads_the_converted_images(tmp_path):
    """The ids and features of `extract-regions DATASET` are those of `extract-regions OUT/images.jsonl`; a row whose
    image does not decode is skipped and counted (fatal with --strict)."""
    rows = flickr_rows(4)
    rows["image"][3] = {"bytes": b"\x89PNG broken", "path": None}
    folder = flickr(tmp_path / "ds", rows)
    tiny = ["--regions", "grid", "--global", "avg", "--backbone", "resnet18", "--weights", "none", "--workers", "0",
            "--device", "cpu", "--image-size", "32"]
    main(["extract-regions", str(folder), *tiny, "-o", str(tmp_path / "direct.h5")])
    good = flickr(tmp_path / "good", flickr_rows(3))
    convert("hf", good, "-o", tmp_path / "out")
    main(["extract-regions", str(tmp_path / "out" / "images.jsonl"), *tiny, "-o", str(tmp_path / "converted.h5")])
    with FeaturesReader(tmp_path / "direct.h5") as direct, FeaturesReader(tmp_path / "converted.h5") as converted:
        assert list(direct.ids) == list(converted.ids) == ["1000.jpg", "1001.jpg", "1002.jpg"]
        assert direct.attrs["num_failed"] == 1 and "row 3, column 'image'" in direct.failed[0]
        ids = list(direct.ids)
        for name in ("regions", "global"):
            np.testing.assert_array_equal(direct.read(ids)[name], converted.read(ids)[name])
    with pytest.raises(SystemExit) as stopped:
        main(["extract-regions", str(folder), *tiny, "--strict", "-o", str(tmp_path / "strict.h5")])
    assert stopped.value.code == 1 and not (tmp_path / "strict.h5").exists()
