"""`vltools convert coco` / `to-coco-results` on the real coco-caption demo results and references."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from convert_cli import DATA, convert

from vltools.errors import VLToolsError
from vltools.io.coco import coco_results, read_coco

RESULTS = DATA / "coco_caption" / "captions_val2014_fakecap_results.json"
REFS = DATA / "coco_caption" / "fakecap_refs_first60.spice_input.json"


def test_results_file_to_captions_and_back_is_identical(tmp_path):
    raw = json.loads(RESULTS.read_text())
    caps, back = tmp_path / "caps.jsonl", tmp_path / "results.json"
    convert("coco", RESULTS, "-o", caps, "--split", "val")
    records = [json.loads(line) for line in caps.read_text().splitlines()]
    assert len(records) == len(raw) == 1000
    assert records == [{"image_id": str(r["image_id"]), "caption": r["caption"].strip(), "split": "val"} for r in raw]
    convert("to-coco-results", caps, "-o", back)
    assert json.loads(back.read_text()) == [{"image_id": r["image_id"], "caption": r["caption"].strip()} for r in raw]


def test_spice_input_refs_become_reference_captions():
    raw = json.loads(REFS.read_text())
    records = read_coco(REFS)
    assert records == [{"image_id": str(entry["image_id"]), "caption": ref, "caption_id": f"{entry['image_id']}#{k}"}
                       for entry in raw for k, ref in enumerate(entry["refs"])]
    assert len({r["image_id"] for r in records}) == 60


def annotations_from_refs() -> dict:
    """A COCO annotations file (captions_val2014.json layout) holding the real references of 60 images."""
    raw = json.loads(REFS.read_text())
    images = [{"id": e["image_id"], "file_name": f"COCO_val2014_{e['image_id']:012d}.jpg", "height": 480,
               "width": 640} for e in raw]
    annotations = [{"image_id": e["image_id"], "id": 1000 * e["image_id"] + k, "caption": ref}
                   for e in raw for k, ref in enumerate(e["refs"])]
    return {"info": {}, "images": images, "licenses": [], "type": "captions", "annotations": annotations}


def test_annotations_file_to_captions(tmp_path):
    data = annotations_from_refs()
    path = tmp_path / "captions_val2014.json"
    path.write_text(json.dumps(data))
    records = read_coco(path, split="val")
    assert records == [{"image_id": str(a["image_id"]), "caption": a["caption"], "caption_id": str(a["id"]),
                        "split": "val"} for a in data["annotations"]]
    by_name = read_coco(path, id_field="file_name")
    assert by_name[0]["image_id"] == data["images"][0]["file_name"]


def test_annotation_of_an_unknown_image_exits_1(tmp_path, vltools_cmd):
    data = annotations_from_refs()
    data["annotations"][7]["image_id"] = 1
    path = tmp_path / "captions_val2014.json"
    path.write_text(json.dumps(data))
    result = vltools_cmd("convert", "coco", path, "-o", tmp_path / "caps.jsonl")
    assert result.returncode == 1
    assert "captions_val2014.json: annotations[7]: image_id 1 is not in 'images'" in result.stderr.decode()
    assert not (tmp_path / "caps.jsonl").exists()


def test_results_need_one_caption_per_image_and_keep_non_numeric_ids():
    with pytest.raises(VLToolsError, match=r"caps.jsonl: record 3: image '42' has a second caption"):
        coco_results([{"image_id": "42", "caption": "a"}, {"image_id": "7", "caption": "b"},
                      {"image_id": "42", "caption": "c"}], "caps.jsonl")
    mixed = coco_results([{"image_id": "42", "caption": "a"}, {"image_id": "x.jpg", "caption": "b"}], "c")
    assert [r["image_id"] for r in mixed] == ["42", "x.jpg"]


def test_unknown_layout_is_an_error(tmp_path: Path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"foo": 1}))
    with pytest.raises(VLToolsError, match="other.json: top level: not a COCO caption file"):
        read_coco(path)
