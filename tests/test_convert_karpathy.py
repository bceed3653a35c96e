"""`vltools convert karpathy` on small JSON files in the exact layout of Karpathy's dataset_*.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from convert_cli import convert

from vltools.cli import main
from vltools.data.converters.karpathy import read_karpathy
from vltools.errors import VLToolsError

COCO_LIKE = {
    "images": [
        {"filepath": "val2014", "sentids": [770337, 771687], "filename": "COCO_val2014_000000391895.jpg",
         "imgid": 0, "split": "test", "cocoid": 391895,
         "sentences": [
             {"tokens": ["a", "man", "with", "a", "red", "helmet", "on", "a", "small", "moped", "on", "a", "dirt",
                         "road"], "raw": "A man with a red helmet on a small moped on a dirt road. ",
              "imgid": 0, "sentid": 770337},
             {"tokens": ["man", "riding", "a", "motor", "bike", "on", "a", "dirt", "road", "on", "the",
                         "countryside"], "raw": "Man riding a motor bike on a dirt road on the countryside.",
              "imgid": 0, "sentid": 771687}]},
        {"filepath": "val2014", "sentids": [681330], "filename": "COCO_val2014_000000522418.jpg", "imgid": 1,
         "split": "restval", "cocoid": 522418,
         "sentences": [{"tokens": ["a", "woman", "wearing", "a", "net", "on", "her", "head", "cutting", "a", "cake"],
                        "raw": "A woman wearing a net on her head cutting a cake. ", "imgid": 1, "sentid": 681330}]},
        {"filepath": "train2014", "sentids": [787980], "filename": "COCO_train2014_000000318556.jpg", "imgid": 2,
         "split": "train", "cocoid": 318556,
         "sentences": [{"tokens": ["a", "very", "clean", "and", "well", "decorated", "empty", "bathroom"],
                        "raw": "A very clean and well decorated empty bathroom", "imgid": 2, "sentid": 787980}]},
    ],
    "dataset": "coco",
}


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "dataset_coco.json"
    path.write_text(json.dumps(data))
    return path


def expected(data: dict, split_names: dict[str, str] | None = None) -> list[dict]:
    """The records straight from the JSON: file name ids, stripped raw text, sentid caption ids."""
    split_names = split_names or {}
    return [{"image_id": image["filename"], "caption": sentence["raw"].strip(),
             "split": split_names.get(image["split"], image["split"]), "caption_id": str(sentence["sentid"])}
            for image in data["images"] for sentence in image["sentences"]]


def test_cli_writes_one_record_per_sentence(tmp_path):
    out = tmp_path / "caps.jsonl"
    convert("karpathy", write(tmp_path, COCO_LIKE), "-o", out)
    assert [json.loads(line) for line in out.read_text().splitlines()] == expected(COCO_LIKE)


def test_restval_kept_or_renamed(tmp_path):
    path = write(tmp_path, COCO_LIKE)
    assert [r["split"] for r in read_karpathy(path)] == ["test", "test", "restval", "train"]
    assert read_karpathy(path, restval_as="train") == expected(COCO_LIKE, {"restval": "train"})
    only = read_karpathy(path, restval_as="train", only_splits={"train"})
    assert [r["caption_id"] for r in only] == ["681330", "787980"]


def test_cocoid_filepath_and_token_options(tmp_path):
    path = write(tmp_path, COCO_LIKE)
    assert [r["image_id"] for r in read_karpathy(path, id_field="cocoid")] == ["391895", "391895", "522418", "318556"]
    assert read_karpathy(path, id_field="filepath")[3]["image_id"] == "train2014/COCO_train2014_000000318556.jpg"
    tokens = read_karpathy(path, text_field="tokens")
    assert tokens[1]["caption"] == " ".join(COCO_LIKE["images"][0]["sentences"][1]["tokens"])


def test_flickr_layout_without_cocoid(tmp_path):
    data = {"images": [{"sentids": [0], "imgid": 0, "split": "train", "filename": "1000092795.jpg",
                        "sentences": [{"tokens": ["two", "young", "guys"], "raw": "Two young guys .",
                                       "imgid": 0, "sentid": 0}]}], "dataset": "flickr30k"}
    path = write(tmp_path, data)
    assert read_karpathy(path) == expected(data)
    with pytest.raises(VLToolsError, match=r"images\[0\]: missing field 'cocoid'"):
        read_karpathy(path, id_field="cocoid")


def test_missing_sentences_exits_1_naming_the_image(tmp_path, vltools_cmd):
    broken = json.loads(json.dumps(COCO_LIKE))
    del broken["images"][1]["sentences"]
    out = tmp_path / "caps.jsonl"
    result = vltools_cmd("convert", "karpathy", write(tmp_path, broken), "-o", out)
    assert result.returncode == 1
    assert "dataset_coco.json: images[1]: missing field 'sentences'" in result.stderr.decode()
    assert not out.exists()


def test_repeated_sentid_and_truncated_json_are_errors(tmp_path):
    repeated = json.loads(json.dumps(COCO_LIKE))
    repeated["images"][2]["sentences"][0]["sentid"] = 770337
    with pytest.raises(VLToolsError, match=r"images\[2\].sentences\[0\]: sentid 770337 repeats"):
        read_karpathy(write(tmp_path, repeated))
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(COCO_LIKE)[:300])
    with pytest.raises(VLToolsError, match=r"cut.json: line 1 column \d+: malformed JSON"):
        read_karpathy(path)


@pytest.mark.parametrize("token", [None, 1, {"x": 1}, ["a"]])
def test_tokens_that_are_not_strings_are_refused_naming_the_sentence(tmp_path, capsys, token):
    """`--text tokens` once wrote Python reprs such as "1 None {'x': 1}" as captions."""
    broken = json.loads(json.dumps(COCO_LIKE))
    broken["images"][2]["sentences"][0]["tokens"][3] = token
    out = tmp_path / "caps.jsonl"
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "karpathy", str(write(tmp_path, broken)), "--text", "tokens", "-o", str(out)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.count("\n") == 1 and not out.exists()
    assert f"dataset_coco.json: images[2].sentences[0]: 'tokens' holds {json.dumps(token)}, not a string" in err
    assert read_karpathy(write(tmp_path, broken))[3]["caption"] == "A very clean and well decorated empty bathroom"
