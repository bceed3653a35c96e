"""`vltools convert flickr` on a slice of the real Flickr8k token file and split lists."""

from __future__ import annotations

import json

import pytest
from convert_cli import DATA, convert

import vltools
from vltools.data.converters.flickr import read_flickr
from vltools.errors import VLToolsError

FLICKR = DATA / "flickr8k"
TOKENS = FLICKR / "Flickr8k.token.txt"
LISTS = {"train": FLICKR / "Flickr_8k.trainImages.txt", "val": FLICKR / "Flickr_8k.devImages.txt",
         "test": FLICKR / "Flickr_8k.testImages.txt"}


def reference() -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    """(name, caption id, caption) per token line and name -> split, parsed here independently."""
    lines = []
    for line in TOKENS.read_text(encoding="utf-8").splitlines():
        caption_id, caption = line.split("\t")
        lines.append((caption_id.split("#")[0], caption_id, caption.strip()))
    splits = {name: split for split, path in LISTS.items() for name in path.read_text().split()}
    return lines, splits


def test_token_file_with_split_lists(tmp_path):
    out = tmp_path / "caps.jsonl"
    convert("flickr", TOKENS, "--train", LISTS["train"], "--val", LISTS["val"], "--test", LISTS["test"], "-o", out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    lines, splits = reference()
    assert len(records) == len(lines) == 410
    assert records == [{"image_id": name, "caption": caption, "caption_id": caption_id,
                        "split": splits.get(name, "unassigned")} for name, caption_id, caption in lines]
    counts = {split: len({r["image_id"] for r in records if r["split"] == split})
              for split in ("train", "val", "test", "unassigned")}
    assert counts == {"train": 64, "val": 12, "test": 4, "unassigned": 2}
    odd = [r for r in records if r["image_id"] == "2258277193_586949ec62.jpg.1"]
    assert len(odd) == 5 and odd[0]["split"] == "unassigned"


def test_the_api_takes_the_split_lists_by_the_command_s_option_names():
    """`vltools.convert("flickr", TOKENS, train=LIST)` as `--train LIST`: the API named them split_files={...}."""
    lines, splits = reference()
    records = vltools.convert("flickr", TOKENS, train=LISTS["train"], val=LISTS["val"], test=LISTS["test"])
    assert records == [{"image_id": name, "caption": caption, "caption_id": caption_id,
                        "split": splits.get(name, "unassigned")} for name, caption_id, caption in lines]
    with pytest.raises(VLToolsError, match="split_files is not an argument of vltools.convert"):
        vltools.convert("flickr", TOKENS, split_files={"train": LISTS["train"]})


def test_drop_unassigned_and_no_lists():
    lines, splits = reference()
    kept = read_flickr(TOKENS, LISTS, drop_unassigned=True)
    assert [r["caption_id"] for r in kept] == [cid for name, cid, _ in lines if name in splits]
    plain = read_flickr(TOKENS)
    assert len(plain) == 410 and all("split" not in r for r in plain)


def test_image_in_two_lists_is_an_error(tmp_path):
    clash = tmp_path / "test.txt"
    clash.write_text(LISTS["train"].read_text().splitlines()[3] + "\n")
    with pytest.raises(VLToolsError, match=r"test.txt: id '.*' is also in the train list"):
        read_flickr(TOKENS, {"train": LISTS["train"], "test": clash})


def test_malformed_line_exits_1_naming_it(tmp_path, vltools_cmd):
    lines = TOKENS.read_text(encoding="utf-8").splitlines()
    lines[11] = lines[11].replace("\t", " ")
    broken = tmp_path / "tokens.txt"
    broken.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = vltools_cmd("convert", "flickr", broken, "-o", tmp_path / "caps.jsonl")
    assert result.returncode == 1
    assert "tokens.txt: line 12: expected 'NAME.jpg#K<TAB>caption'" in result.stderr.decode()
    assert not (tmp_path / "caps.jsonl").exists()
