"""`vltools convert webdataset` on img2dataset-layout shards made by the test: KEY.jpg beside KEY.txt and/or
KEY.json; the ids are those extract-regions gives the same shard's images."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
from click.testing import CliRunner
from convert_cli import convert
from PIL import Image

from vltools.cli import cli, main
from vltools.data.converters import webdataset
from vltools.data.converters.webdataset import member_key, read_webdataset
from vltools.errors import VLToolsError
from vltools.io.features import FeaturesReader


def _jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG")
    return buffer.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _shard(path, members: list[tuple[str, bytes]]):
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            _add(tar, name, data)
    return path


# img2dataset's layout: one key per sample, its image, its caption text and its metadata JSON (with "caption")
SAMPLES = [
    ("000000000.jpg", _jpeg(0)), ("000000000.txt", b"a red square on grass\n"),
    ("000000000.json", json.dumps({"key": "000000000", "caption": "a red square on grass", "status": "success"})
     .encode()),
    ("000000001.jpg", _jpeg(1)), ("000000001.json", json.dumps({"caption": "two dogs \u00e0 la plage"}).encode()),
    ("000000002.jpg", _jpeg(2)), ("000000002.json", json.dumps({"key": "000000002", "caption": None}).encode()),
    ("sub/000000003.jpg", _jpeg(3)), ("sub/000000003.txt", b"  a cat asleep  "),
]
WANT = [{"image_id": "000000000.jpg", "caption": "a red square on grass", "caption_id": "000000000.jpg#0"},
        {"image_id": "000000001.jpg", "caption": "two dogs \u00e0 la plage", "caption_id": "000000001.jpg#0"},
        {"image_id": "sub/000000003.jpg", "caption": "a cat asleep", "caption_id": "sub/000000003.jpg#0"}]


@pytest.fixture
def shard(tmp_path):
    return _shard(tmp_path / "shard-00000.tar", SAMPLES)


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_txt_or_json_caption_of_each_image_becomes_a_record_and_the_uncaptioned_is_skipped(shard, tmp_path,
                                                                                           caplog):
    assert read_webdataset([shard]) == WANT     # first: the command line's logger stops propagating to caplog
    assert "skipped 1 images with no caption" in caplog.text
    out = tmp_path / "caps.jsonl"
    convert("webdataset", shard, "-o", out)
    assert _records(out) == WANT


def test_split_on_every_record_and_shards_joined_in_order(shard, tmp_path):
    second = _shard(tmp_path / "shard-00001.tar", [("000010000.png", _jpeg(5)), ("000010000.txt", b"a boat")])
    records = read_webdataset([shard, second], split="train")
    assert [r["image_id"] for r in records] == ["000000000.jpg", "000000001.jpg", "sub/000000003.jpg",
                                                "000010000.png"]
    assert {r["split"] for r in records} == {"train"}


def test_strict_refuses_an_image_without_caption_naming_shard_and_member(shard, tmp_path):
    out = tmp_path / "caps.jsonl"
    with pytest.raises(VLToolsError, match=r"shard-00000\.tar: member 000000002\.jpg: image with no caption"):
        read_webdataset([shard], strict=True)
    result = CliRunner().invoke(cli, ["convert", "webdataset", str(shard), "--strict", "-o", str(out)])
    assert result.exit_code == 1
    assert not out.exists()


def test_truncated_shard_is_a_one_line_error(tmp_path):
    whole = _shard(tmp_path / "whole.tar", SAMPLES).read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole[: len(whole) // 2 + 100])
    with pytest.raises(VLToolsError, match=r"cut\.tar: not a complete uncompressed tar archive") as caught:
        read_webdataset([cut])
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("members", "problem"), [
    ([("k.jpg", _jpeg(0)), ("k.json", b"{not json")], r"member k\.json: not JSON"),
    ([("k.jpg", _jpeg(0)), ("k.json", b'{"caption": 3}')], r"member k\.json: its \"caption\" is int"),
    ([("k.jpg", _jpeg(0)), ("k.txt", b"\xff\xfe caption")], r"member k\.txt: not UTF-8"),
    ([("k.jpg", _jpeg(0))], "no image has a caption"),
    ([("k.jpg", _jpeg(0)), ("k.json", b"[" * 100_000)],     # once a RecursionError
     r"member k\.json: not JSON \(nested deeper than 100 levels"),
    # two captions of one key: the last one was kept without a word
    ([("k.jpg", _jpeg(0)), ("k.txt", b"a dog"), ("k.en.txt", b"a cat")],
     r"bad\.tar: member k\.en\.txt: the \.txt caption of key 'k' repeats member k\.txt; give each key one \.txt "
     r"caption$"),
    ([("k.jpg", _jpeg(0)), ("k.json", b"{}"), ("k.json", b'{"caption": "a cat"}')],
     r"member k\.json: the \.json caption of key 'k' repeats member k\.json"),
])
def test_bad_caption_members_are_one_line_errors(members, problem, tmp_path):
    with pytest.raises(VLToolsError, match=problem):
        read_webdataset([_shard(tmp_path / "bad.tar", members)])


def test_a_caption_member_over_its_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A .txt member whose header claimed 8 GiB was a MemoryError: members are read through bounded.member_bytes."""
    monkeypatch.setattr(webdataset, "MAX_CAPTION_MEMBER_BYTES", 16)
    shard = _shard(tmp_path / "big.tar", [("k.jpg", _jpeg(0)), ("k.txt", b"a caption of more than 16 bytes")])
    with pytest.raises(VLToolsError, match=r"big\.tar: member k\.txt claims 31 bytes, more than the 16 such a "
                                           r"member may have; caption members \(\.txt, \.json\) hold at most"):
        read_webdataset([shard])


def test_not_a_tar_is_refused(tmp_path):
    listing = tmp_path / "images.txt"
    listing.write_text("a.jpg\n")
    with pytest.raises(VLToolsError, match=r"images\.txt: not a complete uncompressed tar archive"):
        read_webdataset([listing])


def test_member_key_is_webdatasets():
    assert member_key("a/b/000.jpg") == "a/b/000"
    assert member_key("000.seg.png") == "000"


def test_ids_are_those_extract_regions_gives_the_same_shard(shard, tmp_path):
    """extract-regions SHARD, convert webdataset SHARD, match: the captions name the features' images."""
    feats = tmp_path / "feats.h5"
    main(["extract-regions", str(shard), "--regions", "grid", "--global", "avg", "--backbone", "resnet18",
          "--weights", "none", "--workers", "0", "--device", "cpu", "--image-size", "32", "-o", str(feats)])
    caps = tmp_path / "caps.jsonl"
    convert("webdataset", shard, "-o", caps)
    with FeaturesReader(feats) as reader:
        feature_ids = list(reader.ids)
    assert feature_ids == ["000000000.jpg", "000000001.jpg", "000000002.jpg", "sub/000000003.jpg"]
    assert [r["image_id"] for r in _records(caps)] == [i for i in feature_ids if i != "000000002.jpg"]
