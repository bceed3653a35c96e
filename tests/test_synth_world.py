import hashlib
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vltools.errors import VLToolsError
from vltools.io.proxy import read_triplets
from vltools.io.records import read_records
from vltools.synth.scene import COLOURS
from vltools.synth.world import WorldOptions, assign_splits, is_world, write_world

OPTIONS = WorldOptions(seed=3, images=60, pairs=15, aux_images=12, size=96, edit_fraction=0.5)


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "world"
    write_world(out, OPTIONS)
    return out


def test_same_options_give_byte_identical_files(world, tmp_path):
    again = tmp_path / "again"
    write_world(again, OPTIONS)
    assert digests(again) == digests(world)
    other = tmp_path / "other"
    write_world(other, WorldOptions(**{**OPTIONS.__dict__, "seed": 4}))
    assert digests(other)["captions.jsonl"] != digests(world)["captions.jsonl"]


def test_sets_are_independent_of_each_others_sizes(world, tmp_path):
    fewer = tmp_path / "fewer"
    write_world(fewer, WorldOptions(**{**OPTIONS.__dict__, "pairs": 0, "aux_images": 0}))
    mine, theirs = digests(world), digests(fewer)
    assert theirs["captions.jsonl"] == mine["captions.jsonl"] and theirs["images.jsonl"] == mine["images.jsonl"]
    assert not (fewer / "pairs.jsonl").exists() and not (fewer / "pair_images").exists()
    assert "PAIR SET" not in (fewer / "README.txt").read_text()


def test_files_validate_as_their_kinds(world):
    kinds = {"images.jsonl": "images", "captions.jsonl": "captions", "regions.jsonl": "regions",
             "pair_images.jsonl": "images", "pairs.jsonl": "pairs", "aux_images.jsonl": "images",
             "aux_captions.jsonl": "captions"}
    for name, kind in kinds.items():
        assert read_records(world / name, kind)
    assert read_triplets(world / "user_study.jsonl")
    names = {p.name for p in world.iterdir()}
    assert names == set(kinds) | {"README.txt", "images", "masks", "pair_images", "pair_masks", "aux_images",
                                  "aux_masks", "user_study.jsonl"}
    assert not list(world.parent.glob(".world.*"))  # no staging folder left


def test_readme_describes_the_world_without_times(world):
    text = (world / "README.txt").read_text()
    assert "--seed 3 --images 60 --pairs 15 --aux-images 12" in text
    assert all(colour in text for colour in COLOURS)
    assert not re.search(r"\b20\d\d-\d\d-\d\d", text) and str(world) not in text
    assert is_world(world)


@pytest.mark.parametrize("listing", ["images.jsonl", "pair_images.jsonl", "aux_images.jsonl"])
def test_images_masks_and_boxes_agree(world, listing):
    for record in read_records(world / listing, "images"):
        image = np.asarray(Image.open(world / record["path"]))
        mask = np.asarray(Image.open(world / record["mask"]))
        assert image.shape == (96, 96, 3) and mask.shape == (96, 96) and set(np.unique(mask)) <= {0, 255}
        inside = np.zeros(mask.shape, dtype=bool)
        assert len(record["boxes"]) == len(record["objects"]) >= 1
        for (x1, y1, x2, y2), obj in zip(record["boxes"], record["objects"], strict=True):
            assert 0 <= x1 < x2 <= 96 and 0 <= y1 < y2 <= 96 and obj["box"] == [x1, y1, x2, y2]
            inside[y1:y2, x1:x2] = True
            assert (mask[y1:y2, x1:x2] == 255).mean() > 0.25
            cx, cy = obj["center"]
            assert tuple(image[cy, cx]) == COLOURS[obj["colour"]]
        assert not (mask == 255)[~inside].any()
        assert mask.any()


def test_captions_five_distinct_per_image_naming_the_scene(world):
    images = {r["image_id"]: r for r in read_records(world / "images.jsonl", "images")}
    captions = defaultdict(list)
    for record in read_records(world / "captions.jsonl", "captions"):
        captions[record["image_id"]].append(record)
        assert record["split"] == images[record["image_id"]]["split"]
    assert set(captions) == set(images)
    for image_id, records in captions.items():
        texts = [r["caption"] for r in records]
        assert len(texts) == 5 == len(set(texts))
        colours = {o["colour"] for o in images[image_id]["objects"]}
        named = {c for t in texts for c in COLOURS if re.search(rf"\b{c}\b", t)}
        assert named == colours


def test_regions_one_per_object_and_per_relation(world):
    images = {r["image_id"]: r for r in read_records(world / "images.jsonl", "images")}
    regions = defaultdict(list)
    for record in read_records(world / "regions.jsonl", "regions"):
        regions[record["image_id"]].append(record)
    for image_id, records in regions.items():
        boxes = images[image_id]["boxes"]
        objects = images[image_id]["objects"]
        assert [r["box"] for r in records[:len(boxes)]] == boxes
        for record, obj in zip(records, objects, strict=False):
            assert obj["colour"] in record["caption"] and obj["size"] in ("small", "large")
        for record in records[len(boxes):]:
            x1, y1, x2, y2 = record["box"]
            members = [b for b in boxes if x1 <= b[0] and y1 <= b[1] and b[2] <= x2 and b[3] <= y2]
            assert len(members) >= 2


def diff_objects(a: list[dict], b: list[dict]) -> list[str]:
    """Independent count of what differs between two object lists matched by index."""
    if len(a) != len(b):
        return ["count"]
    return [field for x, y in zip(a, b, strict=True) for field in ("shape", "colour", "size", "center")
            if x[field] != y[field]]


def test_near_duplicates_differ_by_one_thing_and_share_a_split(world):
    images = {r["image_id"]: r for r in read_records(world / "images.jsonl", "images")}
    edits = [r for r in images.values() if "edit" in r]
    assert len(edits) >= 0.25 * len(images)
    kinds = Counter()
    for record in edits:
        source = images[record["edit"]["of"]]
        assert source["split"] == record["split"]
        changed = diff_objects(source["objects"], record["objects"])
        kind = record["edit"]["type"]
        kinds[kind] += 1
        expected = {"colour": ["colour"], "shape": ["shape"], "move": ["center"], "swap": ["center", "center"],
                    "add": ["count"], "remove": ["count"]}.get(kind)
        if kind == "size":
            assert "size" in changed and set(changed) <= {"size"}
        else:
            assert changed == expected, (kind, changed)
    assert len(kinds) >= 4


def test_splits_are_about_80_10_10_and_test_has_near_duplicates(world):
    images = read_records(world / "images.jsonl", "images")
    counts = Counter(r["split"] for r in images)
    assert set(counts) == {"train", "val", "test"}
    assert counts["test"] >= 6 and counts["val"] >= 6 and counts["train"] >= 40
    assert any("edit" in r and r["split"] == "test" for r in images)


def test_assign_splits_keeps_groups_whole_and_fills_each_split():
    sizes = [1, 2, 3] * 40
    splits = assign_splits(sizes, np.random.default_rng(0))
    totals = Counter()
    for size, split in zip(sizes, splits, strict=True):
        totals[split] += size
    assert 24 <= totals["test"] <= 26 and 24 <= totals["val"] <= 26 and totals["train"] == 240 - totals["test"] - \
        totals["val"]


def find(objects: list[dict], colour: str, shape: str) -> list[dict]:
    return [o for o in objects if o["colour"] == colour and o["shape"] == shape]


def test_pairs_describe_their_changes_consistently(world):
    images = {r["image_id"]: r for r in read_records(world / "pair_images.jsonl", "images")}
    pairs = defaultdict(list)
    for record in read_records(world / "pairs.jsonl", "pairs"):
        pairs[record["pair_id"]].append(record)
    assert len(pairs) == 15
    for records in pairs.values():
        assert 1 <= len(records) <= 5
        first = records[0]
        a, b = images[first["image_a"]]["objects"], images[first["image_b"]]["objects"]
        assert images[first["image_a"]]["split"] == images[first["image_b"]]["split"] == first["split"]
        assert all(r["split"] == first["split"] and r["image_b"] == first["image_b"] for r in records)
        assert 1 <= len(first["changes"]) <= 3
        for change in first["changes"]:
            kind, what = change["type"], change["what"][0]
            colour, shape = what["colour"], what["shape"]
            if kind == "colour":
                assert find(a, change["a"], shape) and find(b, change["b"], shape)
                assert all(change["a"] in r["description"] and change["b"] in r["description"] for r in records)
            elif kind == "shape":
                assert find(a, colour, change["a"]) and find(b, colour, change["b"])
            elif kind == "size":
                assert find(a, colour, shape)[0]["size"] == change["a"] and find(b, colour, shape)[0]["size"] == \
                    change["b"]
            elif kind in ("add", "remove"):
                assert (len(find(a, colour, shape)), len(find(b, colour, shape))) == (change["a"], change["b"])
            else:
                assert find(a, colour, shape)[0]["center"] != find(b, colour, shape)[0]["center"]
            assert all(colour in r["description"] for r in records)


def test_aux_captions_cover_the_aux_images(world):
    images = {r["image_id"] for r in read_records(world / "aux_images.jsonl", "images")}
    captions = read_records(world / "aux_captions.jsonl", "captions")
    assert Counter(r["image_id"] for r in captions) == dict.fromkeys(images, 5)


def test_refuses_a_non_empty_folder_and_replaces_only_a_world_with_force(world, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(VLToolsError, match="not empty"):
        write_world(busy, OPTIONS)
    with pytest.raises(VLToolsError, match="holds other files"):
        write_world(busy, OPTIONS, force=True)
    assert (busy / "notes.txt").read_text() == "mine"
    with pytest.raises(VLToolsError, match="not empty"):
        write_world(world, OPTIONS)
    empty = tmp_path / "empty"
    empty.mkdir()
    small = WorldOptions(seed=1, images=10, pairs=0, aux_images=0)
    write_world(empty, small)
    before = digests(empty)
    write_world(empty, WorldOptions(seed=2, images=10, pairs=0, aux_images=0), force=True)
    assert digests(empty) != before and is_world(empty)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy", "empty"]


@pytest.mark.parametrize(("field", "value", "message"), [("images", 5, "--images"), ("pairs", 3, "--pairs"),
                                                          ("size", 20, "--size"), ("edit_fraction", 1.0,
                                                                                    "--edit-fraction")])
def test_bad_options_are_refused_before_writing(tmp_path, field, value, message):
    with pytest.raises(VLToolsError, match=message):
        write_world(tmp_path / "w", WorldOptions(**{field: value}))
    assert not (tmp_path / "w").exists()


def test_records_have_stable_key_order(world):
    first = json.loads((world / "captions.jsonl").read_text().splitlines()[0])
    assert list(first) == ["image_id", "caption", "split", "caption_id"]
