"""`vltools extract-regions` and `segment-pool` end to end: every mode's datasets, bad images, strict mode,
standard output through a pipe, the offline error, a SIGKILLed run resumed, shards merged."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import urllib.error
from pathlib import Path

import h5py
import numpy as np
import pytest
from kill_helpers import kill, start_paused, stopped
from PIL import Image
from pipeline_fixtures import (
    merged,
    one_and_two_processes,
    run_process,
    same_but_created,
    synth_world,
    torchrun,
    torchrun_nodes,
)

from vltools.cli import main
from vltools.io.features import FeaturesReader, comparable_attrs
from vltools.vision import backbones

PHOTOS = Path(__file__).parent / "data" / "photos"
TINY = ["--backbone", "resnet18", "--weights", "none", "--workers", "0", "--device", "cpu"]


def _vltools(*args: object) -> int:
    """Run the CLI in this process (fast: no new interpreter); return the exit status."""
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def _subprocess(*args: object, **kwargs) -> subprocess.CompletedProcess:
    return run_process([sys.executable, "-m", "vltools", *map(str, args)], capture_output=True,
                       **kwargs)


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("photos")
    for name in ("china.jpg", "chelsea.png", "coffee.png"):
        shutil.copy(PHOTOS / name, folder / name)
    return folder


def _datasets(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    with h5py.File(path, "r") as handle:
        return {name: (handle[name].shape, str(handle[name].dtype)) for name in handle if name not in ("ids",)}


def test_detector_fixed_k_with_average_global(photos, tmp_path):
    out = tmp_path / "det.h5"
    assert _vltools("-q", "extract-regions", photos, *TINY, "--detector-weights", "none", "--image-size", "64",
                    "--num-regions", "5", "--global", "avg", "-o", out) == 0
    assert _datasets(out) == {"regions": ((3, 5, 512), "float16"), "boxes": ((3, 5, 4), "float32"),
                              "image_size": ((3, 2), "int32"), "global": ((3, 512), "float16"),
                              "failed": ((0,), "object")}
    with FeaturesReader(out) as reader:
        assert reader.ids == ["chelsea.png", "china.jpg", "coffee.png"]
        assert reader.attrs["backbone"] == "resnet18" and reader.attrs["regions"] == "detector"
        assert reader.read(["china.jpg"])["image_size"].tolist() == [[427, 640]]


def test_detector_variable_k_writes_num_regions(photos, tmp_path):
    out = tmp_path / "var.h5"
    assert _vltools("-q", "extract-regions", photos, *TINY, "--detector-weights", "none", "--image-size", "64",
                    "--min-regions", "2", "--max-regions", "6", "--score-threshold", "0.5", "-o", out) == 0
    shapes = _datasets(out)
    assert shapes["regions"] == ((3, 6, 512), "float16") and shapes["num_regions"] == ((3,), "int32")
    with FeaturesReader(out) as reader:
        data = reader.read(reader.ids)
    for row, count in zip(data["regions"], data["num_regions"], strict=True):
        assert 2 <= count <= 6 and not row[count:].any()


def test_grid_with_rmac_in_float32(photos, tmp_path):
    out = tmp_path / "grid.h5"
    assert _vltools("-q", "extract-regions", photos, *TINY, "--regions", "grid", "--global", "rmac",
                    "--image-size", "64", "--dtype", "float32", "-o", out) == 0
    assert _datasets(out) == {"regions": ((3, 4, 512), "float32"), "boxes": ((3, 4, 4), "float32"),
                              "image_size": ((3, 2), "int32"), "global": ((3, 512), "float32"),
                              "failed": ((0,), "object")}
    with FeaturesReader(out) as reader:
        data = reader.read(["coffee.png"])
    assert np.allclose(np.linalg.norm(data["global"][0]), 1.0, atol=1e-5)
    assert np.allclose(data["boxes"][0, -1], [300, 200, 600, 400])


def test_boxes_from_jsonl_with_tencrop_global(photos, tmp_path):
    records = [{"image_id": "cat", "path": str(photos / "chelsea.png"), "boxes": [[10, 20, 200, 280]]},
               {"image_id": "cup", "path": str(photos / "coffee.png"), "boxes": [[0, 0, 600, 400], [50, 60, 70, 80]]}]
    jsonl = tmp_path / "images.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "boxes.h5"
    assert _vltools("-q", "extract-regions", jsonl, *TINY, "--regions", "boxes", "--global", "tencrop",
                    "--crop-size", "32", "--image-size", "64", "-o", out) == 0
    assert _datasets(out) == {"regions": ((2, 2, 512), "float16"), "boxes": ((2, 2, 4), "float32"),
                              "num_regions": ((2,), "int32"), "image_size": ((2, 2), "int32"),
                              "global": ((2, 512), "float16"), "failed": ((0,), "object")}
    with FeaturesReader(out) as reader:
        data = reader.read(["cup", "cat"])
    assert data["boxes"][0].tolist() == records[1]["boxes"] and data["num_regions"].tolist() == [2, 1]
    assert data["boxes"][1, 0].tolist() == records[0]["boxes"][0] and not data["boxes"][1, 1].any()


def test_global_only_rmac_uses_the_long_side(photos, tmp_path):
    out = tmp_path / "rmac.h5"
    assert _vltools("-q", "extract-regions", photos, *TINY, "--regions", "none", "--global", "rmac",
                    "--image-size", "96", "-o", out) == 0
    assert _datasets(out) == {"image_size": ((3, 2), "int32"), "global": ((3, 512), "float16"),
                              "failed": ((0,), "object")}
    with FeaturesReader(out) as reader:
        assert reader.attrs["resize"] == "longer" and reader.attrs["image_size"] == 96


def test_segment_pool_with_random_fcn(photos, tmp_path):
    out = tmp_path / "seg.h5"
    assert _vltools("-q", "segment-pool", photos, *TINY, "--seg-weights", "none", "--image-size", "64",
                    "--class", "bird", "-o", out) == 0
    shapes = _datasets(out)
    assert shapes["featmap"] == ((3, 512, 2, 2), "float16") and shapes["mask"] == ((3, 2, 2), "float32")
    with FeaturesReader(out) as reader:
        assert reader.attrs["mask_class"] == 3
        masks = reader.read(reader.ids)["mask"]
    assert np.all((masks >= 0) & (masks <= 1))


def _bad_folder(root: Path) -> Path:
    folder = root / "mixed"
    folder.mkdir()
    shutil.copy(PHOTOS / "china.jpg", folder / "photo.jpg")
    whole = (PHOTOS / "flower.jpg").read_bytes()
    (folder / "zero.jpg").write_bytes(b"")
    (folder / "truncated.jpg").write_bytes(whole[: len(whole) // 3])
    (folder / "text.jpg").write_text("this is a text file\n")
    Image.new("CMYK", (30, 20), (0, 255, 255, 0)).save(folder / "cmyk.jpg")
    Image.fromarray(np.full((20, 30), 40000, dtype=np.uint16)).save(folder / "deep.png")
    Image.new("RGB", (30, 20), (1, 2, 3)).convert("P").save(folder / "palette.png")
    Image.new("LA", (30, 20), (10, 128)).save(folder / "gray_alpha.png")
    rotated = Image.new("RGB", (30, 20), (200, 10, 10))
    exif = rotated.getexif()
    exif[0x0112] = 8
    buffer = io.BytesIO()
    rotated.save(buffer, format="JPEG", exif=exif.tobytes())
    (folder / "rotated.jpg").write_bytes(buffer.getvalue())
    (folder / "ünïcode 名前.png").write_bytes((PHOTOS / "chelsea.png").read_bytes())
    return folder


def test_bad_images_are_skipped_listed_and_recorded(tmp_path):
    folder = _bad_folder(tmp_path)
    out = tmp_path / "mixed.h5"
    result = _subprocess("extract-regions", folder, *TINY, "--workers", "1", "--regions", "grid",
                         "--image-size", "64", "-o", out)
    assert result.returncode == 0, result.stderr.decode()
    stderr = result.stderr.decode()
    assert "skipped 3 bad images" in stderr
    for name in ("zero.jpg", "truncated.jpg", "text.jpg"):
        assert f"skipped {name}" in stderr
    with FeaturesReader(out) as reader:
        assert sorted(reader.ids) == sorted(["photo.jpg", "cmyk.jpg", "deep.png", "palette.png", "gray_alpha.png",
                                             "rotated.jpg", "ünïcode 名前.png"])
        assert reader.read(["rotated.jpg"])["image_size"].tolist() == [[30, 20]]
        assert reader.attrs["num_failed"] == 3
    with h5py.File(out, "r") as handle:
        failed = dict(line.decode().split("\t") for line in handle["failed"][:])
    assert set(failed) == {"zero.jpg", "truncated.jpg", "text.jpg"} and "empty file" in failed["zero.jpg"]


def test_strict_stops_at_the_first_bad_image_without_output(tmp_path):
    folder = _bad_folder(tmp_path)
    out = tmp_path / "strict.h5"
    result = _subprocess("extract-regions", folder, *TINY, "--regions", "grid", "--image-size", "64", "--strict",
                         "-o", out)
    assert result.returncode == 1 and not out.exists()
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "--strict" in lines[0] and "text.jpg" in lines[0]


def test_hdf5_through_a_pipe(photos, tmp_path):
    result = _subprocess("extract-regions", photos, *TINY, "--regions", "grid", "--image-size", "64")
    assert result.returncode == 0, result.stderr.decode()
    piped = tmp_path / "piped.h5"
    piped.write_bytes(result.stdout)
    with FeaturesReader(piped) as reader:
        assert len(reader) == 3 and reader.shape("regions") == (3, 4, 512)


def test_imagenet_weights_offline_is_one_sentence(photos, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))

    def no_network(url, destination, hash_prefix):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(backbones, "_download", no_network)
    out = tmp_path / "never.h5"
    assert _vltools("extract-regions", photos, "--backbone", "resnet18", "--weights", "imagenet", "-o", out) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "resnet18-f37072fd.pth" in lines[0]
    assert str(tmp_path / "torch" / "hub" / "checkpoints") in lines[0] and not out.exists()


@pytest.mark.parametrize(("stage", "files"), [
    ("extract-regions", ("resnet101-63fe2227.pth", "fasterrcnn_resnet50_fpn_coco-258fb6c6.pth")),
    ("segment-pool", ("resnet101-63fe2227.pth", "fcn_resnet101_coco-7ecb50ca.pth")),
])
def test_the_default_weights_offline_are_named_together_in_one_line(stage, files, photos, tmp_path, monkeypatch,
                                                                     capsys):
    """The default backbone and detector (or FCN) need two files: one run names both, not one at a time."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    tried = []

    def no_network(url, destination, hash_prefix):
        tried.append(Path(destination).name)
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(backbones, "_download", no_network)
    assert _vltools(stage, photos, "-o", tmp_path / "never.h5") == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert tried == list(files) and len(lines) == 1
    assert f"files {files[0]} from https://" in lines[0] and f" and {files[1]} from https://" in lines[0]
    assert f"put them in {tmp_path / 'torch' / 'hub' / 'checkpoints'}/" in lines[0]


def _synth_folder(root: Path, count: int) -> Path:
    folder = root / "synth"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for number in range(count):
        Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(folder / f"img{number:03d}.png")
    return folder


def test_resume_after_sigkill_recomputes_nothing_and_matches_a_full_run(tmp_path, capsys):
    folder = _synth_folder(tmp_path, 24)
    args = ["extract-regions", folder, *TINY, "--regions", "grid", "--global", "avg", "--image-size", "64",
            "--batch-size", "1", "--checkpoint-seconds", "0"]
    full = tmp_path / "full.h5"
    assert _vltools("-q", *args, "-o", full) == 0
    out = tmp_path / "resumed.h5"
    partial = Path(f"{out}.partial")
    process = start_paused("vltools.io.checkpoint:Checkpoint.commit", 3, *args, "-o", out)
    capsys.readouterr()
    assert _vltools(*args, "--resume", "-o", out) == 1  # a second writer while the first runs
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"another process is writing it (pid {process.pid} " in lines[0]
    kill(process)
    assert not out.exists()
    done = len(_chunk_ids(partial))
    assert 3 <= done < 24
    result = _subprocess(*args, "--resume", "-o", out)
    assert result.returncode == 0, result.stderr.decode()
    assert f"extract-regions: resuming {out}: {done} of 24 images kept from an interrupted run\n" in \
        result.stderr.decode()
    assert not partial.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["full.h5", "resumed.h5", "synth"]
    _same_rows(full, out)


def _chunk_ids(partial: Path) -> list[str]:
    """The ids of the finished images in the committed chunks of checkpoint folder `partial`."""
    ids: list[str] = []
    for chunk in sorted(partial.glob("chunk-*.h5")):
        with h5py.File(chunk, "r") as handle:
            ids += [value.decode() for value in handle["ids"][:]]
    return ids


def _same_rows(full: Path, out: Path) -> None:
    """`out` holds the ids and rows of the uninterrupted run's `full`, in its order."""
    with FeaturesReader(full) as a, FeaturesReader(out) as b:
        assert a.ids == b.ids and len(set(b.ids)) == len(b.ids)
        first, second = a.read(a.ids), b.read(a.ids)
    for name in first:
        assert np.array_equal(first[name], second[name]), name


@pytest.mark.parametrize(("number", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_plain_run_stopped_by_ctrl_c_or_sigterm_before_its_first_commit_continues_with_resume(tmp_path, capsys,
                                                                                              number, status):
    """Issue 41: a plain extract-regions stopped in its first minute kept nothing (the open part was dropped) and
    --resume then recomputed everything without a word. Now the finished images are committed as the run stops,
    a rerun without --resume leaves them alone, and --resume says how many it keeps (or that it has none)."""
    folder = _synth_folder(tmp_path, 40)
    args = ["extract-regions", folder, *TINY, "--regions", "grid", "--global", "avg", "--image-size", "64",
            "--batch-size", "1"]
    full = tmp_path / "full.h5"
    assert _vltools(*args, "--resume", "-o", full) == 0
    assert f"extract-regions: nothing to resume for {full}; starting from the beginning\n" in capsys.readouterr().err
    out = tmp_path / "out.h5"
    partial = Path(f"{out}.partial")
    # stopped once the first images are written, before they are committed
    process = start_paused("vltools.io.checkpoint:Checkpoint.add", 1, *args, "-o", out)
    assert sorted(p.name for p in partial.iterdir()) == ["chunk-000000.h5.tmp", "state.json"]
    # the last line says what was kept and how to continue
    word = "interrupted" if number == signal.SIGINT else "terminated"
    assert stopped(process, number) == (status, f"vltools: {word}; 1 of 40 images kept in {partial}/: continue with "
                                                f"{shlex.join(['vltools', '-q', *map(str, args), '-o', str(out)])} "
                                                "--resume")
    kept = len(_chunk_ids(partial))
    assert 1 <= kept < 40 and sorted(p.name for p in partial.iterdir()) == ["chunk-000000.h5", "state.json"]
    assert _vltools(*args, "-o", out) == 1
    assert capsys.readouterr().err == f"vltools: error: {partial}: left by an interrupted run; continue it with " \
                                      "--resume, or delete it\n"
    result = _subprocess(*args, "--resume", "-o", out)
    assert result.returncode == 0, result.stderr.decode()
    assert f"extract-regions: resuming {out}: {kept} of 40 images kept from an interrupted run\n" in \
        result.stderr.decode()
    _same_rows(full, out)


def test_shards_merged_equal_a_single_run(photos, tmp_path):
    args = ["extract-regions", photos, *TINY, "--detector-weights", "none", "--num-regions", "4",
            "--image-size", "64", "--global", "avg", "--batch-size", "1"]
    assert _vltools("-q", *args, "-o", tmp_path / "single.h5") == 0
    for index in range(2):
        assert _vltools("-q", *args, "--shard", f"{index}/2", "-o", tmp_path / f"shard{index}.h5") == 0
    assert _vltools("-q", "merge", tmp_path / "shard0.h5", tmp_path / "shard1.h5", "-o", tmp_path / "all.h5") == 0
    with FeaturesReader(tmp_path / "single.h5") as single, FeaturesReader(tmp_path / "all.h5") as merged:
        assert merged.ids == single.ids == ["chelsea.png", "china.jpg", "coffee.png"]  # shard 0, then shard 1's two
        a, b = single.read(single.ids), merged.read(single.ids)
        assert "shard" not in merged.attrs and merged.attrs["backbone"] == "resnet18"
    for name in a:
        assert np.array_equal(a[name], b[name]), name


@pytest.fixture(scope="module")
def bad_world(tmp_path_factory) -> Path:
    """10 synthetic images, the fourth of them not an image."""
    world = synth_world(tmp_path_factory.mktemp("world"), 10)
    (world / "images" / "img00003.png").write_text("not an image")
    return world


def _torchrun_args(world: Path) -> list[object]:
    """Batches of 2 of the 10 images (the fourth bad): 5 batches, cut into runs of whole batches, one per process."""
    return ["extract-regions", world / "images.jsonl", "--regions", "boxes", "--global", "avg", *TINY,
            "--batch-size", "2", "-o", "feats.h5"]


@pytest.mark.slow      # torchrun: processes of their own, 10-30 s
@pytest.mark.parametrize("processes", [1, 2, 4])
def test_torchrun_processes_each_write_their_part_and_the_set_is_what_one_process_writes(bad_world, tmp_path,
                                                                                         monkeypatch, processes):
    """Issue 50: each gloo process writes its own part (nothing passes through one process); the folder read as
    one input holds the rows one process writes, in its order, and merged it is that file byte for byte but the
    creation time. One process under torchrun writes the file itself."""
    one, two = one_and_two_processes(tmp_path, monkeypatch, *_torchrun_args(bad_world), processes=processes)
    if processes == 1:
        same_but_created(one / "feats.h5", two / "feats.h5")
        return
    names = [f"part-{k:05d}-of-{processes:05d}.h5" for k in range(processes)]
    assert sorted(p.name for p in (two / "feats.h5").iterdir()) == names
    with FeaturesReader(one / "feats.h5") as single, FeaturesReader(two / "feats.h5") as parts:
        assert parts.ids == single.ids and len(parts.ids) == 9
        assert parts.failed == single.failed == ["img00003\tnot an image file Pillow can read"]
        backwards = single.ids[::-1]
        for name in single.fields:
            assert np.array_equal(parts.read(backwards, [name])[name], single.read(backwards, [name])[name]), name
    same_but_created(one / "feats.h5", merged(two / "feats.h5"))


@pytest.mark.slow      # torchrun: processes of their own, 10-30 s
def test_torchrun_a_failure_in_one_process_stops_it_and_leaves_the_others_parts(bad_world, tmp_path):
    """With --strict the bad image (in process 0's part) stops that process with the one line one process prints;
    torchrun stops the job, and what the others finished stays in their own parts or checkpoints."""
    done = torchrun("-q", *_torchrun_args(bad_world), "--strict", cwd=tmp_path)
    assert done.returncode != 0
    assert f"vltools: error: {bad_world}/images/img00003.png: image 'img00003': not an image file" in done.stderr
    assert not (tmp_path / "feats.h5" / "part-00000-of-00002.h5").exists()


def test_shards_by_hand_into_a_folder_make_the_set_one_process_would(bad_world, tmp_path, capsys):
    """`--shard i/n -o FOLDER/` by hand (each on any machine): part i of n; the set once all are there."""
    args = [*_torchrun_args(bad_world)[:-2]]
    for index in (2, 0):
        assert _vltools("-q", *args, "--shard", f"{index}/3", "-o", f"{tmp_path}/set/") == 0
    capsys.readouterr()
    assert _vltools("-q", "merge", tmp_path / "set", "-o", tmp_path / "early.h5") == 1
    assert "part-00001-of-00003 is missing (2 of 3 parts are there); run it" in capsys.readouterr().err
    assert not (tmp_path / "early.h5").exists()
    assert _vltools("-q", *args, "--shard", "1/3", "-o", f"{tmp_path}/set/") == 0
    assert _vltools("-q", *args, "-o", tmp_path / "one.h5") == 0
    with FeaturesReader(tmp_path / "set") as parts, FeaturesReader(tmp_path / "one.h5") as single:
        assert parts.ids == single.ids and parts.attrs["shard"] == "0/1"
    assert _vltools("-q", "merge", tmp_path / "set", "-o", tmp_path / "merged.h5") == 0
    same_but_created(tmp_path / "one.h5", tmp_path / "merged.h5")


@pytest.mark.slow      # torchrun: processes of their own, 10-30 s
def test_a_part_killed_part_way_resumes_alone_under_torchrun(bad_world, tmp_path):
    """Process 1's part (images 4-9, the same code path `--shard 1/2 -o FOLDER/` takes) is killed with SIGKILL after
    its second commit; `torchrun ... --resume` then keeps part 0, finished, as it is and continues part 1 from its
    checkpoint: the set is what one process writes."""
    args = [*_torchrun_args(bad_world)[:-2], "--checkpoint-seconds", "0", "--threads", "1"]   # as torchrun's
    assert _vltools("-q", *args, "-o", tmp_path / "one.h5") == 0
    assert _vltools("-q", *args, "--shard", "0/2", "-o", f"{tmp_path}/set/") == 0
    part0 = tmp_path / "set" / "part-00000-of-00002.h5"
    written = part0.stat().st_mtime_ns
    kill(start_paused("vltools.io.checkpoint:Checkpoint.commit", 2, *args, "--shard", "1/2", "-o", f"{tmp_path}/set/"))
    assert len(_chunk_ids(tmp_path / "set" / "part-00001-of-00002.h5.partial")) == 4
    done = torchrun(*args, "--resume", "-o", "set", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{Path('set') / part0.name}: finished by the interrupted run; kept" in done.stderr   # the first reports
    assert part0.stat().st_mtime_ns == written and not (tmp_path / "set" / "part-00001-of-00002.h5.partial").exists()
    same_but_created(tmp_path / "one.h5", merged(tmp_path / "set"))


@pytest.mark.slow      # torchrun: processes of their own, 10-30 s
def test_two_nodes_sharing_a_rendezvous_write_the_set_one_process_would(bad_world, tmp_path):
    """Issue 50: `torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint HOST:PORT` launched twice on this machine,
    as two machines would, one process each: the two parts make what one process writes."""
    for done in torchrun_nodes("-q", *_torchrun_args(bad_world)[:-2], "-o", "feats", cwd=tmp_path):
        assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "feats").iterdir()) == ["part-00000-of-00002.h5",
                                                                    "part-00001-of-00002.h5"]
    assert _vltools("-q", *_torchrun_args(bad_world)[:-2], "--threads", "1", "-o", tmp_path / "one.h5") == 0
    with FeaturesReader(tmp_path / "one.h5") as single, FeaturesReader(tmp_path / "feats") as parts:
        assert parts.ids == single.ids and parts.failed == single.failed
        assert comparable_attrs(parts.attrs) == comparable_attrs(single.attrs)
        for name, rows in single.read(single.ids).items():
            assert np.array_equal(parts.read(single.ids, [name])[name], rows), name


def test_resume_recomputes_rows_whose_image_changed(tmp_path):
    folder = _synth_folder(tmp_path, 5)
    (folder / "zz_bad.png").write_text("not an image")
    args = ["extract-regions", folder, *TINY, "--regions", "grid", "--image-size", "64", "--batch-size", "1",
            "--checkpoint-seconds", "0"]
    out = tmp_path / "out.h5"
    partial = Path(f"{out}.partial")
    assert _vltools("-q", *args, "--strict", "-o", out) == 1  # stops at zz_bad.png: five images done in parts
    assert not out.exists() and len(_chunk_ids(partial)) == 5
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(folder / "img002.png")
    (folder / "zz_bad.png").unlink()
    result = _subprocess(*args, "--resume", "-o", out)
    assert result.returncode == 0, result.stderr.decode()
    err = result.stderr.decode()
    assert "the inputs of 1 finished items changed since the interrupted run" in err
    assert f"resuming {out}: 4 of 5 images kept from an interrupted run" in err
    assert _vltools("-q", *args, "-o", tmp_path / "fresh.h5") == 0
    with FeaturesReader(out) as resumed, FeaturesReader(tmp_path / "fresh.h5") as fresh:
        assert resumed.ids == fresh.ids
        assert resumed.read(["img002.png"])["image_size"].tolist() == [[40, 40]]
        for name, value in fresh.read(fresh.ids).items():
            assert np.array_equal(value, resumed.read(fresh.ids)[name]), name
    assert not partial.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["fresh.h5", "out.h5", "synth"]


def test_no_good_image_is_an_error_and_leaves_nothing(tmp_path, capsys):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "a.png").write_text("not an image")
    (folder / "b.jpg").write_bytes(b"")
    out = tmp_path / "out.h5"
    for strict in ([], ["--strict"]):
        assert _vltools("-q", "extract-regions", folder, *TINY, "--regions", "grid", *strict, "-o", out) == 1
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "a.png" in lines[0]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bad"]


@pytest.mark.parametrize("to_stdout", [False, True])
def test_features_float16_cannot_hold_name_the_users_output_and_dtype_float32(photos, tmp_path, capsys,
                                                                              monkeypatch, to_stdout):
    """Regions beyond float16's range (here the grid's features times 10^6) stop the run at the first batch, in one
    line that names the output the user gave (or standard output) and --dtype float32, never a part of it."""
    from vltools.infer import extract as extract_module

    real = extract_module.grid_features
    monkeypatch.setattr(extract_module, "grid_features", lambda featmap: real(featmap).abs() * 1e6 + 1e5)
    out = tmp_path / "feats.h5"
    output = [] if to_stdout else ["-o", out]
    assert _vltools("-q", "extract-regions", photos, *TINY, "--regions", "grid", "--image-size", "64", *output) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    name = "standard output" if to_stdout else str(out)
    assert len(lines) == 1 and captured.out == ""
    assert re.fullmatch(rf"vltools: error: {re.escape(name)}: image id '[a-z]+\.(png|jpg)': /regions values exceed "
                        r"float16's range \(largest 65504\); rerun with --dtype float32", lines[0]), lines[0]
    assert ".tmp" not in lines[0] and "parts" not in lines[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stage", ["extract-regions", "segment-pool"])
def test_a_bad_shard_is_a_usage_error(photos, tmp_path, capsys, stage):
    assert _vltools(stage, photos, *TINY, "--shard", "3/2", "-o", tmp_path / "x.h5") == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--shard': need 0 <= i < n" in err and not list(tmp_path.iterdir())


def test_image_files_and_a_tar_shard_are_inputs(photos, tmp_path):
    """`extract-regions imgs/*.jpg imgs/*.png shard.tar`: files known by their names as in their folder, tar members
    by their member names, and a member gives the same row as the same image as a file."""
    with tarfile.open(tmp_path / "shard.tar", "w") as tar:
        tar.add(photos / "china.jpg", arcname="copy/china.jpg")
        tar.addfile(tarfile.TarInfo("copy/china.txt"))  # img2dataset's caption beside the image
    out = tmp_path / "out.h5"
    assert _vltools("-q", "extract-regions", photos / "china.jpg", photos / "chelsea.png", tmp_path / "shard.tar",
                    *TINY, "--regions", "grid", "--image-size", "64", "-o", out) == 0
    with FeaturesReader(out) as reader:
        assert reader.ids == ["china.jpg", "chelsea.png", "copy/china.jpg"]
        rows = reader.read(["china.jpg", "copy/china.jpg"])["regions"]
    np.testing.assert_array_equal(rows[0], rows[1])


@pytest.mark.parametrize("extra", [["--global", "avg"], ["--image-size", "300"], ["--backbone", "resnet18"],
                                   ["--detector-vocab", "."]])
def test_options_that_do_not_apply_to_bottom_up_are_usage_errors(photos, tmp_path, capsys, extra):
    regions = "detector" if extra[0] == "--detector-vocab" else "bottom-up"
    assert _vltools("extract-regions", photos, "--regions", regions, *extra, "-o", tmp_path / "f.h5") == 2
    err = capsys.readouterr().err
    assert ("--regions bottom-up takes no" in err or "it needs --regions bottom-up" in err)
    assert not list(tmp_path.iterdir())


def test_bottom_up_without_weights_names_the_fetch_script_in_one_line(photos, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VLTOOLS_MODELS", str(tmp_path / "store"))
    assert _vltools("extract-regions", photos, "--regions", "bottom-up", "-o", tmp_path / "f.h5") == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--detector-weights bottom-up: neither a checkpoint file nor a model" in lines[0]
    assert "run `bin/fetch_bottom_up_weights.sh` in" in lines[0] and not (tmp_path / "f.h5").exists()


def test_bottom_up_adaptive_k_with_vocabularies(photos, tmp_path):
    from bottom_up_helpers import FEATURE_DIM, save_tiny_detector

    weights = save_tiny_detector(tmp_path)
    vocab = tmp_path / "vocab"
    vocab.mkdir()
    (vocab / "objects_vocab.txt").write_text("".join(f"object{i}\n" for i in range(8)), encoding="utf-8")
    (vocab / "attributes_vocab.txt").write_text("red\nlarge,big\nwooden\nshiny\n", encoding="utf-8")
    out = tmp_path / "bu.h5"
    assert _vltools("-q", "extract-regions", photos, "--regions", "bottom-up", "--detector-weights", weights,
                    "--min-regions", "4", "--max-regions", "20", "--detector-vocab", vocab, "--workers", "0",
                    "--device", "cpu", "-o", out) == 0
    assert _datasets(out) == {"regions": ((3, 20, FEATURE_DIM), "float16"), "boxes": ((3, 20, 4), "float32"),
                              "num_regions": ((3,), "int32"), "image_size": ((3, 2), "int32"),
                              "labels": ((3, 20), "int32"), "label_scores": ((3, 20), "float32"),
                              "attributes": ((3, 20), "int32"), "attribute_scores": ((3, 20), "float32"),
                              "failed": ((0,), "object")}
    with FeaturesReader(out) as reader:
        attrs = reader.attrs
        counts = reader.read(reader.ids, ["num_regions"])["num_regions"]
    assert ((counts >= 4) & (counts <= 20)).all()
    assert attrs["extractor"] == "bottom-up" and attrs["num_regions"] == "4-20 at score >= 0.2"
    assert json.loads(attrs["attribute_names"]) == ["red", "large", "wooden", "shiny"]
    assert json.loads(attrs["label_names"])[7] == "object7"


def test_files_whose_names_are_no_ids_are_skipped_and_recorded_escaped_or_stop_strict(tmp_path, capsys):
    """A name that is not UTF-8 was a UnicodeEncodeError traceback; one with a tab or ESC became an id silently."""
    folder = tmp_path / "named"
    folder.mkdir()
    shutil.copy(PHOTOS / "china.jpg", folder / "photo.jpg")
    for name in (b"\xff\xfe.jpg", b"tab\there.jpg", b"esc\x1b.jpg"):
        shutil.copy(PHOTOS / "china.jpg", os.path.join(os.fsencode(folder), name))
    out = tmp_path / "named.h5"
    assert _vltools("extract-regions", folder, *TINY, "--regions", "grid", "--image-size", "32", "-o", out) == 0
    with FeaturesReader(out) as reader:
        assert reader.ids == ["photo.jpg"] and reader.attrs["num_failed"] == 3
    with h5py.File(out, "r") as handle:
        failed = dict(line.decode().split("\t") for line in handle["failed"][:])
    assert set(failed) == {"\\xff\\xfe.jpg", "tab\\there.jpg", "esc\\x1b.jpg"}
    assert failed["\\xff\\xfe.jpg"] == "its name is not UTF-8, which an id cannot: rename it"
    capsys.readouterr()
    strict = tmp_path / "strict.h5"
    assert _vltools("extract-regions", folder, *TINY, "--regions", "grid", "--image-size", "32", "--strict",
                    "-o", strict) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "which an id cannot: rename it" in err and not strict.exists()


def test_a_pixel_limit_beyond_the_stated_maximum_is_a_usage_error(photos, tmp_path, capsys):
    """--max-pixels 100000000000 was a MemoryError on the first large image."""
    out = tmp_path / "f.h5"
    assert _vltools("extract-regions", photos, *TINY, "--max-pixels", "100000000000", "-o", out) == 2
    assert "must be an integer from 1 to 268435456, not 100000000000" in capsys.readouterr().err and not out.exists()


def test_a_combination_the_library_refuses_names_the_options_and_is_a_usage_error(tmp_path, capsys):
    """The library raises with Python names (num_regions); while the stage runs they are spelled as its options."""
    (tmp_path / "imgs").mkdir()
    assert "give either --num-regions (fixed K) or --min-regions/--max-regions (variable K)" in \
        usage_error(tmp_path, capsys, "--num-regions", "5", "--max-regions", "9")
    assert "--regions bottom-up takes no --global, --image-size, --backbone or --weights" in \
        usage_error(tmp_path, capsys, "--regions", "bottom-up", "--global", "avg")
    assert not (tmp_path / "f.h5").exists()


def usage_error(tmp_path: Path, capsys: pytest.CaptureFixture, *args: str) -> str:
    """Standard error of `extract-regions tmp_path/imgs ARGS -o f.h5`, which must exit 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(["extract-regions", str(tmp_path / "imgs"), *args, "-o", str(tmp_path / "f.h5")])
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_the_detector_weights_help_names_the_commands_that_register_the_released_detectors(capsys):
    assert _vltools("extract-regions", "--help") == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("the released detectors are registered by bin/fetch_bottom_up_weights.sh --fixed36 (bottom-up-k36), "
            "bin/fetch_bottom_up_weights.sh (bottom-up).") in help_text
