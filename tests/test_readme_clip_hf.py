"""The README's "CLIP and Hugging Face datasets" lines run as written, on the project's photos and captions (an
OpenCLIP model with random weights in place of the pretrained tag, which cannot be fetched offline) and on a tiny
dataset in nlphuji/flickr30k's layout."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from vltools.cli import main

ROOT = Path(__file__).parent.parent
SECTION = (ROOT / "README.md").read_text(encoding="utf-8").split("## CLIP and Hugging Face datasets")[1] \
    .split("\n## ")[0]
BLOCKS = re.findall(r"```sh\n(.*?)```", SECTION, re.S)


def commands(block: str) -> list[list[str]]:
    """The block's command lines, comments left out, as argument lists without the leading `vltools`."""
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    assert all(line.startswith("vltools ") for line in lines if line)
    return [shlex.split(line)[1:] for line in lines if line]


def run_all(block: str, replacements: dict[str, str], capsys: pytest.CaptureFixture,
            offline: tuple[str, ...] = ()) -> dict[str, str]:
    """Run each line of `block` with `replacements` made in its arguments (and `offline` options added to
    extract-regions, whose default weights cannot be fetched here); return each line's standard output."""
    outputs = {}
    for args in commands(block):
        given = [replacements.get(arg, arg) for arg in args]
        main(["--quiet", *given, *(offline if args[0] == "extract-regions" else ())])  # an error exits
        outputs[" ".join(args[:2])] = capsys.readouterr().out
    return outputs


def test_the_clip_lines_run_as_written(tmp_path, monkeypatch, capsys):
    pytest.importorskip("open_clip")
    monkeypatch.chdir(tmp_path)
    outputs = run_all(BLOCKS[0], {"openclip:ViT-B-32": "openclip:ViT-B-32:random",
                                  "photos/": str(ROOT / "tests/data/photos"),
                                  "captions.jsonl": str(ROOT / "examples/demo/captions.jsonl")}, capsys)
    assert "openclip:ViT-B-32:laion2b_s34b_b79k" in outputs["models available"]
    assert json.loads(outputs["score retrieval"])["n_images"] == 5
    found = json.loads(outputs["search img_emb.h5"])
    assert found["query"] == "a cat on a sofa" and len(found["ids"]) == 5
    assert len((tmp_path / "ranks.jsonl").read_text().splitlines()) > 5


def test_the_hugging_face_lines_run_as_written(tmp_path, monkeypatch, capsys):
    pytest.importorskip("datasets")
    from hf_helpers import flickr

    monkeypatch.chdir(tmp_path)
    dataset = flickr(tmp_path / "flickr30k")
    run_all(BLOCKS[1], {"flickr30k/": str(dataset)}, capsys,
            ("--backbone", "resnet18", "--weights", "none", "--regions", "grid", "--image-size", "64", "--device",
             "cpu", "--workers", "0"))
    assert len((tmp_path / "f30k" / "images.jsonl").read_text().splitlines()) == 4
    assert len((tmp_path / "f30k" / "captions.jsonl").read_text().splitlines()) == 20
    assert (tmp_path / "feats.h5").stat().st_size > 0
