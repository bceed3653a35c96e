"""Image listing and robust decoding: every bad-image kind is reported, odd modes become RGB."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vltools.errors import VLToolsError
from vltools.vision.images import (
    BadImage,
    ImageDataset,
    ImageItem,
    list_inputs,
    load_rgb,
    resized_shape,
    ten_crops,
)
from vltools.vision.limits import MAX_PIXELS_LIMIT

PHOTOS = Path(__file__).parent / "data" / "photos"


def _jpeg_bytes(image: Image.Image, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", **kwargs)
    return buffer.getvalue()


def test_folder_listing_is_recursive_sorted_with_relative_unicode_ids(tmp_path):
    (tmp_path / "sub" / "déjà").mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(tmp_path / "sub" / "déjà" / "ünï.png")
    Image.new("RGB", (8, 8)).save(tmp_path / "b.JPG")
    (tmp_path / "notes.txt").write_text("not listed")
    items = list_inputs([tmp_path])
    assert [item.image_id for item in items] == ["b.JPG", "sub/déjà/ünï.png"]
    assert items[1].path == tmp_path / "sub" / "déjà" / "ünï.png"


def test_list_file_and_jsonl_inputs_resolve_relative_paths(tmp_path):
    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "imgs" / "a.png")
    (tmp_path / "list.txt").write_text("imgs/a.png\n\n")
    records = [{"image_id": "x", "path": "imgs/a.png", "boxes": [[0, 0, 4, 4]]}]
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    from_list = list_inputs([tmp_path / "list.txt"])
    from_jsonl = list_inputs([tmp_path / "in.jsonl"])
    assert from_list[0].image_id == "imgs/a.png" and from_list[0].path == tmp_path / "imgs" / "a.png"
    assert from_jsonl[0].image_id == "x" and from_jsonl[0].boxes == ((0.0, 0.0, 4.0, 4.0),)
    assert from_jsonl[0].path == tmp_path / "imgs" / "a.png"


def test_duplicate_ids_and_empty_folder_are_errors(tmp_path):
    (tmp_path / "list.txt").write_text("a.png\na.png\n")
    with pytest.raises(VLToolsError, match="appears twice"):
        list_inputs([tmp_path / "list.txt"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(VLToolsError, match="no image files"):
        list_inputs([tmp_path / "empty"])


def test_a_named_pipe_or_a_device_is_named_as_such_not_missing(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(VLToolsError, match=r"pipe: is a named pipe, not a file; give an image folder"):
        list_inputs([tmp_path / "pipe"])
    with pytest.raises(VLToolsError, match=r"^/dev/null: is a device, not a file; give an image folder"):
        list_inputs(["/dev/null"])
    with pytest.raises(VLToolsError, match=r"absent: no such file or folder; give an image folder"):
        list_inputs([tmp_path / "absent"])


def test_resized_shape_modes():
    assert resized_shape(300, 600, "shorter", 100) == (100, 200)
    assert resized_shape(100, 1000, "shorter", 100, max_size=500) == (50, 500)
    assert resized_shape(300, 600, "longer", 100) == (50, 100)
    assert resized_shape(300, 600, "square", 64) == (64, 64)


@pytest.mark.parametrize("kind, reason", [
    ("zero-byte", "empty file"),
    ("truncated", "truncated"),
    ("text", "not an image"),
    ("bomb-error", "decompression bomb"),
    ("bomb-warning", "decompression bomb"),
])
def test_bad_images_raise_bad_image_with_reason(tmp_path, kind, reason):
    path = tmp_path / "bad.jpg"
    whole = _jpeg_bytes(Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)))
    if kind == "zero-byte":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(whole[: len(whole) // 2])
    elif kind == "text":
        path.write_text("hello, I am not a JPEG\n")
    else:
        path.write_bytes(whole)
    max_pixels = {"bomb-error": 1000, "bomb-warning": 3000}.get(kind, 10**8)  # 4096 px: > 2x limit, > limit
    previous = Image.MAX_IMAGE_PIXELS
    with pytest.raises(BadImage, match=reason):
        load_rgb(path, max_pixels=max_pixels)
    assert Image.MAX_IMAGE_PIXELS == previous


def test_cmyk_jpeg_becomes_rgb(tmp_path):
    path = tmp_path / "cmyk.jpg"
    Image.new("CMYK", (16, 12), (0, 255, 255, 0)).save(path)  # pure red in CMYK
    image, size = load_rgb(path)
    assert image.mode == "RGB" and size == (12, 16)
    r, g, b = np.asarray(image).reshape(-1, 3).mean(0)
    assert r > 200 and g < 60 and b < 60


def test_16_bit_png_is_rescaled_to_8_bit(tmp_path):
    path = tmp_path / "deep.png"
    Image.fromarray(np.array([[0, 32768, 65535]], dtype=np.uint16)).save(path)
    image, _ = load_rgb(path)
    assert image.mode == "RGB"
    assert np.asarray(image)[0, :, 0].tolist() == [0, 128, 255]


def test_palette_and_alpha_pngs_become_rgb_on_white(tmp_path):
    palette = tmp_path / "palette.png"
    Image.new("RGB", (8, 8), (10, 200, 30)).convert("P", palette=Image.ADAPTIVE).save(palette)
    la = tmp_path / "la.png"
    Image.new("LA", (8, 8), (0, 0)).save(la)  # black, fully transparent
    rgba = tmp_path / "rgba.png"
    Image.new("RGBA", (8, 8), (0, 0, 255, 255)).save(rgba)
    assert np.asarray(load_rgb(palette)[0])[0, 0].tolist() == [10, 200, 30]
    assert np.asarray(load_rgb(la)[0])[0, 0].tolist() == [255, 255, 255]
    assert np.asarray(load_rgb(rgba)[0])[0, 0].tolist() == [0, 0, 255]


def test_exif_rotated_jpeg_is_upright_with_transposed_size(tmp_path):
    array = np.zeros((20, 40, 3), dtype=np.uint8)
    array[:, :20] = (255, 0, 0)  # left half red
    image = Image.fromarray(array)
    exif = image.getexif()
    exif[0x0112] = 6  # stored rotated: display after rotating 90 degrees clockwise
    path = tmp_path / "rotated.jpg"
    path.write_bytes(_jpeg_bytes(image, exif=exif.tobytes(), quality=95))
    upright, (h, w) = load_rgb(path)
    assert (h, w) == (40, 20) and upright.size == (20, 40)
    pixels = np.asarray(upright).astype(int)
    assert pixels[2, 10, 0] > 200 and pixels[-3, 10, 0] < 60  # the red half is now on top
    drafted, size = load_rgb(path, plan=lambda hh, ww: (hh // 4, ww // 4))
    assert size == (40, 20)


def test_large_jpeg_draft_decoding_keeps_original_size():
    path = PHOTOS / "china.jpg"
    full, size = load_rgb(path)
    small, small_size = load_rgb(path, plan=lambda h, w: resized_shape(h, w, "shorter", 96))
    assert size == small_size == (427, 640) and full.size == (640, 427)
    assert min(small.size) >= 96 and small.size[0] < 640


def test_dataset_yields_resized_images_and_failures(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    shutil.copy(PHOTOS / "chelsea.png", folder / "cat.png")
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    items = list_inputs([folder])
    dataset = ImageDataset(items, "shorter", 64, max_size=100)
    broken, cat = dataset[0], dataset[1]
    assert "error" in broken and items[0].image_id == "broken.png"
    assert cat["orig_size"] == (300, 451)
    assert tuple(cat["image"].shape) == (3, 64, 96) and cat["image"].dtype.is_floating_point is False
    crops = ImageDataset(items[1:], "shorter", 64, ten_crop=32)[0]["crops"]
    assert tuple(crops.shape) == (10, 3, 32, 32)


def test_ten_crops_are_corners_centre_and_flips():
    array = np.arange(16 * 16 * 3, dtype=np.uint8).reshape(16, 16, 3)
    image = Image.fromarray(array)
    crops = ten_crops(image, 14).numpy().transpose(0, 2, 3, 1)  # shorter side 16 -> 16, crops of 14
    assert np.array_equal(crops[0], array[:14, :14])
    assert np.array_equal(crops[3], array[2:, 2:])
    assert np.array_equal(crops[4], array[1:15, 1:15])
    assert np.array_equal(crops[5], crops[0][:, ::-1])


def test_inputs_that_cannot_fit_their_image_fail_with_a_reason(tmp_path):
    """A box wholly outside the image, a mask of another size, a looping symlink: reported, never silent."""
    Image.new("RGB", (96, 96)).save(tmp_path / "a.png")
    (tmp_path / "masks").mkdir()
    Image.new("L", (50, 50)).save(tmp_path / "masks" / "a.png")
    (tmp_path / "loop.png").symlink_to(tmp_path / "loop.png")
    items = list_inputs([tmp_path])
    assert [item.image_id for item in items] == ["a.png", "loop.png", "masks/a.png"]
    outside = ImageItem("a.png", tmp_path / "a.png", ((100.0, 0.0, 120.0, 50.0),))
    inside = ImageItem("a.png", tmp_path / "a.png", ((90.0, 0.0, 120.0, 50.0),))
    dataset = ImageDataset([outside, inside, items[1]], "shorter", 64)
    assert "lies wholly outside the 96x96 image" in dataset[0]["error"] and "error" not in dataset[1]
    assert "Too many levels of symbolic links" in dataset[2]["error"]
    masked = ImageDataset(items[:1], "square", 64, mask_dir=tmp_path / "masks")[0]
    assert masked["error"] == "its mask is 50x50 but the image is 96x96; masks must have the image's size"


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_image_files_given_by_name_are_known_by_file_name_with_or_without_extension(tmp_path):
    """`extract-regions imgs/*.jpg` and a single image: ids as the folder would give; no extension: by header."""
    shutil.copy(PHOTOS / "china.jpg", tmp_path / "a.jpg")
    shutil.copy(PHOTOS / "chelsea.png", tmp_path / "photo")  # a PNG without an extension
    items = list_inputs([tmp_path / "a.jpg", tmp_path / "photo"])
    assert [(item.image_id, item.path) for item in items] == [("a.jpg", tmp_path / "a.jpg"),
                                                              ("photo", tmp_path / "photo")]
    assert load_rgb(items[1])[1] == (300, 451)
    (tmp_path / "sub").mkdir()
    shutil.copy(PHOTOS / "china.jpg", tmp_path / "sub" / "a.jpg")
    with pytest.raises(VLToolsError, match="'a.jpg' appears twice"):
        list_inputs([tmp_path / "a.jpg", tmp_path / "sub" / "a.jpg"])


def test_a_webdataset_tar_shard_is_read_by_member_without_extracting(tmp_path):
    """img2dataset layout: key.jpg beside key.txt and key.json; the images are the items, ids the member names."""
    photos = {name: (PHOTOS / name).read_bytes() for name in ("china.jpg", "chelsea.png")}
    archive = _tar(tmp_path / "00000.tar", {"00000/000000000.jpg": photos["china.jpg"],
                                            "00000/000000000.txt": b"a", "00000/000000000.json": b"{}",
                                            "00000/000000001.png": photos["chelsea.png"]})
    items = list_inputs([archive])
    assert [item.image_id for item in items] == ["00000/000000000.jpg", "00000/000000001.png"]
    assert all(item.path == archive for item in items)
    for item, name in zip(items, photos, strict=True):
        assert np.array_equal(np.asarray(load_rgb(item)[0]), np.asarray(load_rgb(PHOTOS / name)[0]))
    assert ImageDataset(items, "shorter", 32)[1]["orig_size"] == (300, 451)
    cut = tmp_path / "cut.tar"
    cut.write_bytes(archive.read_bytes()[:1500])  # the first member's header survives, its bytes do not
    with pytest.raises(BadImage, match="truncated tar archive"):
        load_rgb(list_inputs([cut])[0])
    with pytest.raises(VLToolsError, match="no image members"):
        list_inputs([_tar(tmp_path / "text.tar", {"a.txt": b"caption"})])


def test_other_files_are_one_line_naming_the_file_and_the_accepted_kinds(tmp_path):
    (tmp_path / "weights.bin").write_bytes(bytes([0xFF, 0xFE, 0x00, 0x81]) * 64)
    with pytest.raises(VLToolsError, match=r"weights.bin: not an input vltools reads; give an image folder, image "
                                           r"files, an uncompressed tar of images, a text list"):
        list_inputs([tmp_path / "weights.bin"])
    archive = _tar(tmp_path / "imgs.tar", {"a.jpg": (PHOTOS / "china.jpg").read_bytes()})
    (tmp_path / "imgs.tar.gz").write_bytes(gzip.compress(archive.read_bytes()))
    with pytest.raises(VLToolsError, match="imgs.tar.gz: a compressed file; .* decompress it first"):
        list_inputs([tmp_path / "imgs.tar.gz"])
    (tmp_path / "list.txt").write_text("\ufeffa.jpg\n", encoding="utf-8")  # a BOM is not part of the first name
    assert list_inputs([tmp_path / "list.txt"])[0].image_id == "a.jpg"


@pytest.mark.parametrize(("name", "shown", "problem"), [
    (b"tab\there.png", "tab\\there.png", "holds the control character '\\t'"),
    (b"esc\x1b[2J.png", "esc\\x1b[2J.png", "holds the control character '\\x1b'"),
    (b"\xff\xfe.png", "\\xff\\xfe.png", "is not UTF-8"),
])
def test_a_folder_file_whose_name_is_no_id_is_listed_escaped_and_fails_like_a_corrupt_image(tmp_path, name, shown,
                                                                                           problem):
    """One badly named file among many is skipped, counted and recorded (fatal with --strict), not a traceback."""
    Image.new("RGB", (8, 8)).save(tmp_path / "good.png")
    shutil.copy(tmp_path / "good.png", os.path.join(os.fsencode(tmp_path), name))
    items = list_inputs([tmp_path])
    assert [item.image_id for item in items] == sorted([shown, "good.png"])
    bad = next(item for item in items if item.image_id == shown)
    assert bad.path == tmp_path  # messages name the folder and the escaped id, on one line
    with pytest.raises(BadImage, match=rf"^its name {re.escape(problem)}, which an id cannot: rename it$"):
        load_rgb(bad)
    failures = [sample.get("error") for sample in ImageDataset(items, "shorter", 8)]
    assert sum(error is not None for error in failures) == 1


def test_a_named_image_file_or_a_list_line_that_is_no_id_is_refused_in_one_line(tmp_path):
    Image.new("RGB", (8, 8)).save(tmp_path / "good.png")
    bad = os.path.join(os.fsencode(tmp_path), b"\xff\xfe.png")
    shutil.copy(tmp_path / "good.png", bad)
    with pytest.raises(VLToolsError, match=r"\\xff\\xfe.png: image name '\\\\xff\\\\xfe.png' is not UTF-8, which an "
                                           r"id cannot; rename the file$"):
        list_inputs([os.fsdecode(bad)])
    (tmp_path / "list.txt").write_bytes(b"good.png\nbidi\xe2\x80\xaegnp.exe\n")
    with pytest.raises(VLToolsError, match=r"list.txt: line 2: image name 'bidi\\\\u202egnp.exe' holds the "
                                           r"bidirectional control U\+202E, which an id cannot; rename the file$"):
        list_inputs([tmp_path / "list.txt"])


def test_a_tar_member_whose_name_is_no_id_fails_like_a_corrupt_image(tmp_path):
    photo = (PHOTOS / "china.jpg").read_bytes()
    archive = _tar(tmp_path / "shard.tar", {"ok.jpg": photo, "two\nlines.jpg": photo})
    items = list_inputs([archive])
    assert [item.image_id for item in items] == ["ok.jpg", "two\\nlines.jpg"]
    assert load_rgb(items[0])[1] == (427, 640)
    with pytest.raises(BadImage, match=r"^its name holds the control character '\\n', which an id cannot"):
        load_rgb(items[1])


def test_a_tar_member_claiming_more_than_the_archive_holds_fails_before_any_allocation(tmp_path):
    """A 2 KB tar whose header claims an 8 GiB member was a MemoryError: the read asked for the claimed size."""
    info = tarfile.TarInfo("huge.jpg")
    info.size = 8 * 2**30
    archive = tmp_path / "bomb.tar"
    archive.write_bytes(info.tobuf(format=tarfile.GNU_FORMAT) + (PHOTOS / "china.jpg").read_bytes()[:1536])
    items = list_inputs([archive])
    assert [(item.image_id, item.member.size) for item in items] == [("huge.jpg", 8 * 2**30)]
    with pytest.raises(BadImage, match=r"^truncated tar archive: member huge.jpg claims 8,589,934,592 bytes but the "
                                       r"archive holds 1,536 after its start$"):
        load_rgb(items[0])
    assert "claims 8,589,934,592 bytes" in ImageDataset(items, "shorter", 8)[0]["error"]


def test_the_pixel_limit_is_bounded_so_a_bomb_is_skipped_not_a_memory_error(tmp_path):
    """--max-pixels 100000000000 let a decompression bomb decode (a MemoryError); the limit is at most 2**28."""
    Image.new("1", (20_000, 14_000)).save(tmp_path / "bomb.png")  # 280 million pixels in a few kilobytes
    with pytest.raises(BadImage, match="too many pixels"):
        load_rgb(tmp_path / "bomb.png", max_pixels=MAX_PIXELS_LIMIT)
    for value in (0, MAX_PIXELS_LIMIT + 1, 100_000_000_000):
        with pytest.raises(VLToolsError, match=rf"^max_pixels must be in \[1, 268435456\], not {value}$"):
            load_rgb(tmp_path / "bomb.png", max_pixels=value)
        with pytest.raises(VLToolsError, match="max_pixels must be in"):
            ImageDataset([], "shorter", 8, max_pixels=value)


def test_hugging_face_datasets_are_inputs_with_the_ids_of_their_id_column(tmp_path):
    """A save_to_disk folder, a parquet file and a folder of parquet shards list their rows' images (a row per
    caption: its image once), decoded from the embedded bytes or from the path under the dataset's folder."""
    from hf_helpers import coco_karpathy, flickr, jpeg, per_caption

    folder = flickr(tmp_path / "f30k")
    items = list_inputs([folder])
    assert [item.image_id for item in items] == ["1000.jpg", "1001.jpg", "1002.jpg", "1003.jpg"]
    expected = np.asarray(Image.open(io.BytesIO(jpeg(2))).convert("RGB"))
    image, size = load_rgb(items[2])
    assert size == (40, 48) and np.array_equal(np.asarray(image), expected)
    shards = list_inputs([per_caption(tmp_path / "hub")])
    assert [item.image_id for item in shards] == ["COCO_val2014_000000000000.jpg", "COCO_val2014_000000000001.jpg"]
    assert [item.cell.row for item in shards] == [0, 3]
    coco = list_inputs([coco_karpathy(tmp_path / "coco" / "karpathy.parquet", tmp_path / "coco")])
    assert len(coco) == 4 and load_rgb(coco[3])[1] == (40, 48)


def test_a_dataset_image_that_does_not_decode_fails_naming_its_row_and_column(tmp_path):
    from hf_helpers import flickr, flickr_rows

    rows = flickr_rows(3)
    rows["image"][1] = {"bytes": b"\xff\xd8\xff not a jpeg", "path": None}
    items = list_inputs([flickr(tmp_path / "bad", rows)])
    with pytest.raises(BadImage, match=r"^row 1, column 'image': (corrupt or truncated image|not an image file)"):
        load_rgb(items[1])
    failures = [sample.get("error") for sample in ImageDataset(items, "shorter", 8)]
    assert [error is not None for error in failures] == [False, True, False]


def test_a_dataset_image_file_that_is_missing_fails_naming_its_row_and_the_file(tmp_path):
    from hf_helpers import coco_karpathy

    parquet = coco_karpathy(tmp_path / "karpathy.parquet", tmp_path)
    (tmp_path / "val2014" / "COCO_val2014_000000000002.jpg").unlink()
    items = list_inputs([parquet])
    with pytest.raises(BadImage, match=r"^row 2, column 'filepath/filename': cannot read .*COCO_val2014_000000000002"
                                       r"\.jpg \(No such file or directory\)$"):
        load_rgb(items[2])
