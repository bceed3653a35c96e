"""A write that fails part way (over `ulimit -f`, a full disk) ends every writing stage in one line naming the output
and the cause, exit 1: no traceback, no segmentation fault, no lock or temporary file left, an earlier output at the
path untouched. Each stage runs in a subprocess whose file size limit (RLIMIT_FSIZE) is set before it starts."""

from __future__ import annotations

import contextlib
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pipeline_fixtures import run_process
from tiny_matching import TINY, make_world

from vltools.cli import main

PHOTOS = Path(__file__).parent / "data" / "photos"
EXTRACT = ["--backbone", "resnet18", "--weights", "none", "--workers", "0", "--device", "cpu", "--image-size", "64",
           "--detector-weights", "none", "--num-regions", "36"]
TRAIN = ["--model", "vse", "--epochs", "1", *TINY]
EARLIER = b"an earlier output, to be kept\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """Tiny features and captions, a checkpoint trained on them, and three photos."""
    folder = tmp_path_factory.mktemp("world")
    features, captions = make_world(folder)
    model = folder / "vse.pt"
    with contextlib.suppress(SystemExit):
        main(["-q", "train", str(features), str(captions), *TRAIN, "-o", str(model)])
    assert model.is_file()
    photos = folder / "photos"
    photos.mkdir()
    for name in ("china.jpg", "chelsea.png", "coffee.png"):
        shutil.copy(PHOTOS / name, photos / name)
    return {"features": features, "captions": captions, "model": model, "photos": photos}


def _vltools(args: list[object], file_limit: int | None = None) -> subprocess.CompletedProcess:
    """Run vltools in a subprocess whose files may grow to `file_limit` bytes at most (None: no limit)."""

    def limit() -> None:
        if file_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return run_process([sys.executable, "-m", "vltools", "-q", *map(str, args)], capture_output=True, text=True,
                       preexec_fn=limit)


def _earlier(path: Path) -> Path:
    path.write_bytes(EARLIER)
    return path


def _assert_one_line_failure(result: subprocess.CompletedProcess, output: Path, cause: str) -> None:
    """Exit 1 with one line naming `output` and `cause`; no lock, temporary or part file beside it (a stage's
    other outputs, such as train's log, may be there); an earlier output at `output` untouched."""
    assert result.returncode == 1, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"vltools: error: {output}: cannot write (")
    assert cause in lines[0].lower()
    assert _left(output) == []
    assert output.read_bytes() == EARLIER


def _left(output: Path) -> list[str]:
    """The lock, temporary and part files beside `output`."""
    return sorted(p.name for p in output.parent.iterdir()
                  if p.name.startswith(output.name) and any(t in p.name for t in (".lock", ".tmp", ".partial")))


def test_extract_regions_over_the_file_size_limit(world, tmp_path):
    out = _earlier(tmp_path / "x.h5")
    result = _vltools(["extract-regions", world["photos"], *EXTRACT, "-o", out], file_limit=100_000)
    _assert_one_line_failure(result, out, "file too large")


def test_match_sims_over_the_file_size_limit(world, tmp_path):
    sims = _earlier(tmp_path / "s.h5")
    result = _vltools(["match", "--model", world["model"], world["features"], world["captions"], "--split", "val",
                       "--sims", sims, "-o", "-"], file_limit=20_000)
    _assert_one_line_failure(result, sims, "file too large")


def test_train_checkpoint_over_the_file_size_limit(world, tmp_path):
    model = _earlier(tmp_path / "vse.pt")
    size = world["model"].stat().st_size
    result = _vltools(["train", world["features"], world["captions"], *TRAIN, "-o", model], file_limit=size // 2)
    _assert_one_line_failure(result, model, "file too large")


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 300 KB tmpfs (needs root and a system that lets it mount one)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mount = shutil.which("mount")
    mounted = mount is not None and subprocess.run([mount, "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(folder)],
                                                   capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("cannot mount a small tmpfs here (needs root and mount permission)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def _fill(folder: Path, leave: int) -> None:
    """Fill `folder`'s file system until `leave` bytes are free."""
    with open(folder / "fill", "wb") as stream:
        free = shutil.disk_usage(folder).free
        stream.write(bytes(max(0, free - leave)))


def test_extract_regions_on_a_full_disk(world, small_disk):
    out = _earlier(small_disk / "x.h5")
    result = _vltools(["extract-regions", world["photos"], *EXTRACT, "-o", out])
    assert result.returncode == 1, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vltools: error: {out}: cannot write (")
    assert "no space left on device" in lines[0].lower()
    assert out.read_bytes() == EARLIER
    # the images finished before the merge ran out of space are kept for --resume, and the error says so
    left = _left(out)
    assert left in ([], [f"{out.name}.partial"])
    if left:
        assert f"kept in {out}.partial: rerun with --resume" in lines[0]
        assert sorted(p.name for p in (small_disk / left[0]).iterdir()) == ["chunk-000000.h5", "state.json"]


def test_match_sims_on_a_full_disk(world, small_disk):
    sims = _earlier(small_disk / "s.h5")
    _fill(small_disk, 8_000)
    result = _vltools(["match", "--model", world["model"], world["features"], world["captions"], "--split", "val",
                       "--sims", sims, "-o", "-"])
    _assert_one_line_failure(result, sims, "no space left on device")


def test_train_on_a_full_disk(world, small_disk):
    model = _earlier(small_disk / "vse.pt")
    _fill(small_disk, world["model"].stat().st_size // 2)
    result = _vltools(["train", world["features"], world["captions"], *TRAIN, "-o", model])
    _assert_one_line_failure(result, model, "no space left on device")
