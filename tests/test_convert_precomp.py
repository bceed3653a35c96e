"""`vltools convert precomp` / `to-precomp` on the real SCAN f30k and CSRAN caption files with random features."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest
from convert_cli import DATA as CONVERT_DATA
from convert_cli import convert

from vltools.cli import main
from vltools.data.converters import precomp
from vltools.errors import ArgumentError, VLToolsError
from vltools.io.features import FeaturesReader

DATA = CONVERT_DATA / "precomp"


def raw_lines(path: Path) -> list[str]:
    """The caption file's lines as SCAN reads them: split on newline bytes, stripped."""
    return [line.strip().decode("utf-8") for line in path.read_bytes().split(b"\n") if line.strip()]


def derived_names() -> list[str]:
    """Image names of the first 50 f30k test images from the provenance index (column 3)."""
    index = DATA / "f30k_precomp" / "DERIVED_test_image_index.tsv"
    rows = [line.split("\t") for line in index.read_text().splitlines()
            if line and not line.startswith(("#", "image_index"))]
    return [row[2] for row in rows]


@pytest.fixture
def f30k(tmp_path: Path) -> tuple[Path, np.ndarray, list[str]]:
    """A precomp folder: the real first 250 f30k test captions, their 50 image names, random 50 x 36 x 2048."""
    folder = tmp_path / "f30k_precomp"
    folder.mkdir()
    shutil.copy(DATA / "f30k_precomp" / "test_caps.txt", folder / "test_caps.txt")
    names = derived_names()
    (folder / "test_imagename.txt").write_text("\n".join(names) + "\n")
    images = np.random.default_rng(0).standard_normal((50, 36, 2048)).astype(np.float32)
    np.save(folder / "test_ims.npy", images)
    return folder, images, names


def test_f30k_precomp_to_vltools_keeps_every_value_caption_and_id(f30k, tmp_path):
    folder, images, names = f30k
    feats, caps = tmp_path / "feats.h5", tmp_path / "caps.jsonl"
    convert("precomp", folder, "--split", "test", "--features", feats, "--captions", caps)
    assert len(names) == 50
    with FeaturesReader(feats) as reader:
        assert reader.ids == names
        np.testing.assert_array_equal(reader.read(names, ["regions"])["regions"], images)
        attrs = reader.attrs
    assert (attrs["backbone"], attrs["weights"], attrs["regions"]) == ("precomp", "unknown", "precomp")
    assert attrs["source"].endswith("test_ims.npy")
    records = [json.loads(line) for line in caps.read_text().splitlines()]
    lines = raw_lines(folder / "test_caps.txt")
    assert len(records) == len(lines) == 250
    for i, (record, line) in enumerate(zip(records, lines, strict=True)):
        assert record == {"image_id": names[i // 5], "caption": line, "split": "test",
                          "caption_id": f"{names[i // 5]}#{i % 5}"}


def test_round_trip_back_to_precomp_is_exact(f30k, tmp_path):
    folder, images, names = f30k
    feats, caps, out = tmp_path / "feats.h5", tmp_path / "caps.jsonl", tmp_path / "back"
    convert("precomp", folder, "--split", "test", "--features", feats, "--captions", caps)
    convert("to-precomp", feats, caps, out, "--split", "test")
    np.testing.assert_array_equal(np.load(out / "test_ims.npy"), images)
    assert raw_lines(out / "test_caps.txt") == raw_lines(folder / "test_caps.txt")
    assert (out / "test_ids.txt").read_text().splitlines() == names


def test_csran_sample_imagename_per_image(tmp_path):
    folder = tmp_path / "csran"
    folder.mkdir()
    shutil.copy(DATA / "csran_f30k" / "test_caps.txt", folder)
    names = (DATA / "csran_f30k" / "test_imagename.txt").read_text().splitlines()[:10]
    (folder / "test_imagename.txt").write_text("\n".join(names) + "\n")
    np.save(folder / "test_ims.npy", np.ones((10, 36, 2048), np.float32))
    result = convert("precomp", folder, "--split", "test", "--captions", "-")
    records = [json.loads(line) for line in result.stdout.splitlines()]
    lines = raw_lines(folder / "test_caps.txt")
    assert [r["caption"] for r in records] == lines
    assert [r["image_id"] for r in records] == [name for name in names for _ in range(5)]


def test_ids_file_with_one_line_per_caption(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    shutil.copy(DATA / "csran_f30k" / "test_caps.txt", folder)
    (folder / "test_ids.txt").write_text("".join(f"{i}\n" * 5 for i in (391895, 522418, 184613, 318219, 554625,
                                                                         397133, 37777, 252219, 87038, 174482)))
    for per_image in (5, None):
        data = precomp.read_precomp(folder, "test", per_image=per_image)
        assert data.image_ids[:3] == ["391895", "522418", "184613"]
        assert data.records[5]["caption_id"] == "522418#0"


def test_csran_full_imagename_against_ten_images_fails_cleanly(tmp_path, vltools_cmd):
    folder = tmp_path / "csran"
    folder.mkdir()
    for name in ("test_caps.txt", "test_imagename.txt"):
        shutil.copy(DATA / "csran_f30k" / name, folder)
    np.save(folder / "test_ims.npy", np.ones((10, 36, 8), np.float32))
    result = vltools_cmd("convert", "precomp", folder, "--split", "test", "--features", tmp_path / "f.h5",
                         "--captions", tmp_path / "c.jsonl")
    assert result.returncode == 1
    message = result.stderr.decode().strip().splitlines()
    assert len(message) == 1 and "test_imagename.txt: line 2" in message[0]
    assert not (tmp_path / "f.h5").exists() and not (tmp_path / "c.jsonl").exists()


def test_global_vectors_one_caption_per_image_and_default_ids(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    lines = raw_lines(DATA / "f30k_precomp" / "test_caps.txt")[:20]
    (folder / "dev_caps.txt").write_text("\n".join(lines) + "\n")
    vectors = np.random.default_rng(1).standard_normal((20, 64)).astype(np.float32)
    np.save(folder / "dev_ims.npy", vectors)
    feats, caps = tmp_path / "f.h5", tmp_path / "c.jsonl"
    convert("precomp", folder, "--split", "dev", "--features", feats, "--captions", caps, "--dtype", "float16")
    with h5py.File(feats) as handle:
        assert "regions" not in handle
        np.testing.assert_array_equal(handle["global"][:], vectors.astype(np.float16))
    records = [json.loads(line) for line in caps.read_text().splitlines()]
    assert [r["image_id"] for r in records] == [f"dev_{i}" for i in range(20)]
    assert [r["caption_id"] for r in records] == [f"dev_{i}#0" for i in range(20)]


def test_caption_count_not_a_multiple_of_images_is_an_error(f30k, tmp_path):
    folder, _, _ = f30k
    np.save(folder / "test_ims.npy", np.zeros((40, 36, 4), np.float32))
    (folder / "test_imagename.txt").unlink()
    with pytest.raises(VLToolsError, match="test_caps.txt: 250 caption lines for 40 images"):
        precomp.read_precomp(folder, "test")


def test_blank_caption_line_is_named(tmp_path):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "test_caps.txt").write_text("a dog .\n\na cat .\n")
    with pytest.raises(VLToolsError, match=r"test_caps.txt: line 2: blank caption line"):
        precomp.read_precomp(folder, "test", per_image=1)


def test_without_images_the_ratio_must_be_given(tmp_path, capsys):
    folder = tmp_path / "p"
    folder.mkdir()
    shutil.copy(DATA / "f30k_precomp" / "test_caps.txt", folder)
    with pytest.raises(VLToolsError, match="give captions_per_image=N$"):    # as the Python API names it
        precomp.read_precomp(folder, "test")
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "precomp", str(folder), "--split", "test", "--captions", str(tmp_path / "c.jsonl")])
    assert exit_info.value.code == 1 and capsys.readouterr().err.strip().endswith("give --captions-per-image N")
    assert len(precomp.read_precomp(folder, "test", per_image=5).image_ids) == 50


def test_features_are_copied_in_chunks_not_loaded_whole(tmp_path):
    images = np.random.default_rng(2).standard_normal((40, 36, 2048)).astype(np.float32)  # 11.8 MB
    np.save(tmp_path / "x_ims.npy", images)
    mapped = precomp.open_precomp_images(tmp_path / "x_ims.npy")
    tracemalloc.start()
    precomp.write_precomp_features(mapped, [str(i) for i in range(40)], tmp_path / "f.h5", "x_ims.npy",
                                   chunk_bytes=1 << 20)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < images.nbytes / 4
    with h5py.File(tmp_path / "f.h5") as handle:
        np.testing.assert_array_equal(handle["regions"][:], images)


def test_to_precomp_refuses_uneven_caption_counts_and_writes_nothing(f30k, tmp_path, vltools_cmd):
    folder, _, names = f30k
    feats, caps, out = tmp_path / "feats.h5", tmp_path / "caps.jsonl", tmp_path / "back"
    convert("precomp", folder, "--split", "test", "--features", feats, "--captions", caps)
    kept = caps.read_text().splitlines()[1:]
    caps.write_text("\n".join(kept) + "\n")
    result = vltools_cmd("convert", "to-precomp", feats, caps, out, "--split", "test")
    assert result.returncode == 1
    assert f"image '{names[0]}' has 4 captions" in result.stderr.decode()
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize(("options", "problem"), [
    ({}, "{features} or {captions} must be given (or both): nothing to write"),
    ({"features": "-", "captions": "-"}, "{features} and {captions} cannot both be standard output"),
])
def test_the_outputs_are_refused_before_reading_naming_them_per_interface(tmp_path, capsys, options, problem):
    missing = tmp_path / "absent"    # never read: the outputs are checked first
    with pytest.raises(ArgumentError) as error:
        precomp.convert_precomp(missing, "test", **options)
    assert str(error.value) == problem.format(features="features", captions="captions")
    argv = ["convert", "precomp", str(missing), "--split", "test"]
    for name, value in options.items():
        argv += [f"--{name}", value]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and problem.format(features="--features", captions="--captions") in err


def test_features_without_an_ims_file_is_refused_and_nothing_is_written(tmp_path, capsys):
    folder = tmp_path / "csran"
    folder.mkdir()
    for name in ("test_caps.txt", "test_imagename.txt"):
        shutil.copy(DATA / "csran_f30k" / name, folder)
    with pytest.raises(VLToolsError, match=r"csran: no test_ims.npy to convert to features$"):
        precomp.convert_precomp(folder, "test", features=tmp_path / "f.h5", captions=tmp_path / "c.jsonl")
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "precomp", str(folder), "--split", "test", "--features", str(tmp_path / "f.h5")])
    assert exit_info.value.code == 1 and capsys.readouterr().err.strip().endswith("to convert to --features")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["csran"]


def test_convert_precomp_counts_what_it_wrote(f30k, tmp_path):
    folder, _, names = f30k
    assert precomp.convert_precomp(folder, "test", captions=tmp_path / "c.jsonl") == {"captions": 250}
    assert not (tmp_path / "f.h5").exists()
    written = precomp.convert_precomp(folder, "test", features=tmp_path / "f.h5")
    assert written == {"images": 50}
    with FeaturesReader(tmp_path / "f.h5") as reader:
        assert reader.ids == names
    back = precomp.write_precomp(tmp_path / "f.h5", tmp_path / "c.jsonl", tmp_path / "out", "test")
    assert back == {"images": 50, "captions": 250,
                    "files": [str(tmp_path / "out" / f"test_{name}") for name in ("ims.npy", "caps.txt", "ids.txt")]}
