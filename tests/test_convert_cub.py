"""`vltools convert cub` on a text_c10 folder in CUB's layout, built by the test."""

from __future__ import annotations

import json

import pytest
from convert_cli import convert

from vltools.cli import main
from vltools.data.converters.cub import read_cub
from vltools.errors import VLToolsError

IMAGES = {"001.Black_footed_Albatross": ["Black_Footed_Albatross_0001_796111", "Black_Footed_Albatross_0002_55"],
          "002.Laysan_Albatross": ["Laysan_Albatross_0001_545"]}


def caption(image: str, k: int) -> str:
    return f"this bird {image.split('_')[0].lower()} has a white belly and grey wings, caption {k}."


@pytest.fixture
def text_c10(tmp_path):
    root = tmp_path / "text_c10"
    for bird_class, images in IMAGES.items():
        (root / bird_class).mkdir(parents=True)
        for image in images:
            (root / bird_class / f"{image}.txt").write_text("".join(caption(image, k) + "\n" for k in range(10)))
    return root


def test_every_caption_file_line_becomes_a_record(text_c10, tmp_path):
    out = tmp_path / "caps.jsonl"
    convert("cub", text_c10, "-o", out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    want = [{"image_id": f"{bird_class}/{image}", "caption": caption(image, k),
             "caption_id": f"{bird_class}/{image}#{k}"}
            for bird_class, images in sorted(IMAGES.items()) for image in sorted(images) for k in range(10)]
    assert records == want


def test_split_lists_by_class_and_by_image(text_c10, tmp_path):
    trainval = tmp_path / "trainvalclasses.txt"
    trainval.write_text("001.Black_footed_Albatross\n")
    test = tmp_path / "test.txt"
    test.write_text("001.Black_footed_Albatross/Black_Footed_Albatross_0002_55.jpg\n")
    records = read_cub(text_c10, {"trainval": trainval, "test": test})
    splits = {r["image_id"]: r["split"] for r in records}
    assert splits == {"001.Black_footed_Albatross/Black_Footed_Albatross_0001_796111": "trainval",
                      "001.Black_footed_Albatross/Black_Footed_Albatross_0002_55": "test",
                      "002.Laysan_Albatross/Laysan_Albatross_0001_545": "unassigned"}
    kept = read_cub(text_c10, {"trainval": trainval}, drop_unassigned=True)
    assert {r["image_id"].split("/")[0] for r in kept} == {"001.Black_footed_Albatross"}


def test_empty_caption_file_exits_1(text_c10, tmp_path, vltools_cmd):
    (text_c10 / "002.Laysan_Albatross" / "Laysan_Albatross_0001_545.txt").write_text("\n")
    result = vltools_cmd("convert", "cub", text_c10, "-o", tmp_path / "caps.jsonl")
    assert result.returncode == 1
    assert "Laysan_Albatross_0001_545.txt: no captions" in result.stderr.decode()
    assert not (tmp_path / "caps.jsonl").exists()


def test_not_a_text_folder(tmp_path):
    with pytest.raises(VLToolsError, match="no <class>/<image>.txt files"):
        read_cub(tmp_path)


def test_a_split_list_given_twice_is_a_usage_error_naming_the_option(text_c10, tmp_path, capsys):
    listed = tmp_path / "test.txt"
    listed.write_text("002.Laysan_Albatross\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "cub", str(text_c10), "--split-list", "test", str(listed), "--split-list", "test",
              str(listed), "-o", str(tmp_path / "caps.jsonl")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--split-list names split 'test' twice; give one file per split" in err
    assert not (tmp_path / "caps.jsonl").exists()
    pairs = read_cub(text_c10, [("test", listed)], drop_unassigned=True)
    assert {r["image_id"] for r in pairs} == {"002.Laysan_Albatross/Laysan_Albatross_0001_545"}
