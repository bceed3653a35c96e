"""`vltools convert visual-genome` on the real Visual Genome v1.2 sample (images 1-5)."""

from __future__ import annotations

import json

import pytest
from convert_cli import DATA, convert

from vltools.cli import main
from vltools.data.converters.visual_genome import (
    read_image_sizes,
    read_split_lists,
    read_visual_genome,
    visual_genome_records,
)
from vltools.errors import ArgumentError, VLToolsError

VG = DATA / "visual_genome"
REGIONS = VG / "region_descriptions_v1.2_5images.json"
IMAGES = VG / "image_data_5images.json"


def test_regions_become_region_captions_with_corner_boxes(tmp_path):
    out = tmp_path / "regions.jsonl"
    convert("visual-genome", REGIONS, "--image-data", IMAGES, "-o", out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    raw = json.loads(REGIONS.read_text())
    sizes = {image["image_id"]: [image["height"], image["width"]] for image in json.loads(IMAGES.read_text())}
    want = [{"image_id": str(entry["id"]), "caption": region["phrase"].strip(),
             "box": [region["x"], region["y"], region["x"] + region["width"], region["y"] + region["height"]],
             "region_id": str(region["region_id"]), "image_size": sizes[entry["id"]]}
            for entry in raw for region in entry["regions"]
            if region["phrase"].strip() and region["width"] > 0 and region["height"] > 0]
    assert records == want
    assert len(records) > 1200 and {r["image_id"] for r in records} == {"1", "2", "3", "4", "5"}


def test_splits_and_clipping(tmp_path):
    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({"train": [1, 2, 3], "val": [4]}))
    records = read_visual_genome(REGIONS, read_image_sizes(IMAGES), read_split_lists(splits), clip=True)
    assert {r["image_id"]: r["split"] for r in records} == {"1": "train", "2": "train", "3": "train", "4": "val",
                                                              "5": "unassigned"}
    for record in records:
        height, width = record["image_size"]
        x1, y1, x2, y2 = record["box"]
        assert 0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height
    dropped = read_visual_genome(REGIONS, None, read_split_lists(splits), drop_unassigned=True)
    assert "5" not in {r["image_id"] for r in dropped}


def test_region_without_phrase_field_exits_1_naming_it(tmp_path, vltools_cmd):
    raw = json.loads(REGIONS.read_text())
    del raw[2]["regions"][10]["phrase"]
    broken = tmp_path / "region_descriptions.json"
    broken.write_text(json.dumps(raw))
    result = vltools_cmd("convert", "visual-genome", broken, "-o", tmp_path / "r.jsonl")
    assert result.returncode == 1
    assert r"region_descriptions.json: [2].regions[10]: missing field 'phrase'" in result.stderr.decode()
    assert not (tmp_path / "r.jsonl").exists()


def test_image_missing_from_image_data_is_an_error(tmp_path):
    sizes = read_image_sizes(IMAGES)
    del sizes["3"]
    with pytest.raises(VLToolsError, match=r"\[2\]: image 3 is not in the image data file"):
        read_visual_genome(REGIONS, sizes)


def test_nan_and_infinite_boxes_are_skipped_and_counted_never_written(tmp_path, caplog):
    """Python's json reads NaN and Infinity; such boxes were once written (not JSON, refused by inspect)."""
    raw = json.loads(REGIONS.read_text())
    raw[0]["regions"][0]["x"] = float("nan")
    raw[0]["regions"][1]["width"] = float("inf")
    raw[0]["regions"][2]["y"] = 1e308
    raw[0]["regions"][2]["height"] = 1e308    # x + width overflows to infinity
    broken = tmp_path / "region_descriptions.json"
    broken.write_text(json.dumps(raw))
    out = tmp_path / "r.jsonl"
    convert("visual-genome", broken, "-o", out)
    records = [json.loads(line, parse_constant=pytest.fail) for line in out.read_text().splitlines()]
    assert len(records) == len(read_visual_genome(REGIONS)) - 3
    assert "skipped 3 regions with a NaN or infinite box" in caplog.text
    bad = {str(raw[0]["regions"][k]["region_id"]) for k in range(3)}
    assert not bad & {r["region_id"] for r in records}


def test_the_records_of_the_files_are_those_of_what_they_hold(tmp_path):
    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({"train": [1, 2], "val": [4]}))
    records = visual_genome_records(REGIONS, IMAGES, splits, clip_boxes=True, drop_unassigned=True)
    assert records == read_visual_genome(REGIONS, read_image_sizes(IMAGES), read_split_lists(splits), clip=True,
                                         drop_unassigned=True)
    assert {r["image_id"] for r in records} == {"1", "2", "4"} and records[0]["image_size"] == [600, 800]


def test_clip_boxes_without_image_data_is_refused_naming_both_per_interface(tmp_path, capsys):
    with pytest.raises(ArgumentError, match=r"^clip_boxes needs image_data: the image sizes to clip to$"):
        visual_genome_records(tmp_path / "absent.json", clip_boxes=True)
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "visual-genome", str(REGIONS), "--clip-boxes", "-o", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--clip-boxes needs --image-data: the image sizes to clip to" in err
    assert not (tmp_path / "r.jsonl").exists()
