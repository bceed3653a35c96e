"""Hugging Face datasets read as image-caption rows: the columns of the known layouts detected, ids, splits,
captions and caption ids as each layout holds them, and bad layouts refused in one line naming column and row."""

from __future__ import annotations

import sys

import datasets
import pyarrow
import pyarrow.parquet
import pytest
from hf_helpers import FLICKR, captions, coco_karpathy, flickr, flickr_dict, flickr_rows, jpeg, per_caption

from vltools.errors import VLToolsError
from vltools.io import hf
from vltools.io.hf import Columns, columns, dataset_parts, dataset_rows, image_source


def test_flickr30k_layout_rows_keep_ids_splits_captions_and_sentids(tmp_path):
    folder = flickr(tmp_path / "f30k")
    (part,) = dataset_parts(folder)
    assert columns(part) == Columns(("image",), "caption", "filename", "split")
    rows = list(dataset_rows(folder))
    assert [row.image_id for row in rows] == ["1000.jpg", "1001.jpg", "1002.jpg", "1003.jpg"]
    assert [row.split for row in rows] == ["train", "train", "val", "test"]
    assert rows[2].captions == tuple(captions(2)) and rows[2].caption_ids == ("10", "11", "12", "13", "14")
    assert image_source(rows[3].image) == jpeg(3)


def test_a_dataset_dict_gives_its_split_names_and_rows_counted_within_each(tmp_path):
    rows = list(dataset_rows(flickr_dict(tmp_path / "dd")))
    assert [(row.image_id, row.split, row.image.row) for row in rows] == [
        ("1000.jpg", "train", 0), ("1001.jpg", "train", 1), ("1002.jpg", "train", 2), ("1003.jpg", "test", 0)]
    assert image_source(rows[3].image) == jpeg(3)


def test_coco_karpathy_images_are_filepath_and_filename_under_the_image_root(tmp_path):
    parquet = coco_karpathy(tmp_path / "coco.parquet", tmp_path / "coco")
    (part,) = dataset_parts(parquet)
    assert columns(part) == Columns(("filepath", "filename"), "sentences", "filename", "split")
    rows = list(dataset_rows(parquet, image_root=tmp_path / "coco"))
    assert [row.split for row in rows] == ["train", "restval", "val", "test"]
    assert rows[1].image_id == "COCO_train2014_000000000001.jpg" and rows[1].caption_ids[0] == "55"
    assert image_source(rows[2].image) == tmp_path / "coco" / "val2014" / "COCO_val2014_000000000002.jpg"
    default = next(iter(dataset_rows(parquet)))          # without a root: under the parquet file's folder
    assert image_source(default.image) == tmp_path / "train2014" / "COCO_train2014_000000000000.jpg"
    by_cocoid = list(dataset_rows(parquet, id="cocoid", image=["url"], caption="sentences"))
    assert [row.image_id for row in by_cocoid] == ["100", "101", "102", "103"]


def test_a_row_per_caption_takes_the_sentence_structs_raw_and_sentid_and_the_shards_split(tmp_path):
    folder = per_caption(tmp_path / "hub")
    (part,) = dataset_parts(folder)
    assert part.split == "train" and part.parquet
    rows = list(dataset_rows(folder, split=None))
    assert [(row.image_id, row.captions, row.caption_ids) for row in rows[:2]] == [
        ("COCO_val2014_000000000000.jpg", ("coco image 0 sentence 0",), ("0",)),
        ("COCO_val2014_000000000000.jpg", ("coco image 0 sentence 1",), ("1",))]


def test_ids_from_a_named_column_or_else_row_numbers(tmp_path):
    rows = list(dataset_rows(flickr_dict(tmp_path / "dd"), id="img_id"))
    assert [row.image_id for row in rows] == ["0", "1", "2", "3"]
    plain = flickr_rows(2)
    del plain["filename"], plain["img_id"]
    features = datasets.Features({name: FLICKR[name] for name in plain})
    datasets.Dataset.from_dict(plain, features=features).save_to_disk(str(tmp_path / "plain"))
    assert [row.image_id for row in dataset_rows(tmp_path / "plain")] == ["0", "1"]


def test_no_caption_column_is_one_line_listing_the_columns(tmp_path):
    rows = flickr_rows(2)
    rows["sentences_raw"] = rows.pop("caption")
    folder = tmp_path / "odd"
    features = dict(FLICKR)
    features["sentences_raw"] = features.pop("caption")
    datasets.Dataset.from_dict(rows, features=datasets.Features(features)).save_to_disk(str(folder))
    with pytest.raises(VLToolsError, match=r"odd: no caption column \(caption, captions, sentences, text, alt_text\); "
                                           r"its columns are image, sentids, split, img_id, filename, sentences_raw; "
                                           r"give caption_column$"):
        list(dataset_rows(folder))
    assert len(list(dataset_rows(folder, caption="sentences_raw"))) == 2
    assert len(list(dataset_rows(folder, captions=False))) == 2       # listing images needs no captions


def test_a_caption_list_of_the_wrong_type_names_the_column_and_row(tmp_path):
    parquet = coco_karpathy(tmp_path / "coco.parquet", tmp_path / "coco")
    with pytest.raises(VLToolsError, match=r"coco.parquet: row 0, column 'sentids': holds \[50, 51, 52, 53, 54\] "
                                           r"\(list<element: int64>\), not a caption text, a list of texts or "
                                           r"Karpathy sentences \{raw\}; give caption_column the column of caption "
                                           r"texts$"):
        list(dataset_rows(parquet, caption="sentids"))
    with pytest.raises(VLToolsError, match=r"row 0, column 'cocoid': holds 100 \(int64\), not an Image .* or a "
                                           r"text path"):
        list(dataset_rows(parquet, image=["cocoid"]))
    with pytest.raises(VLToolsError, match=r"coco.parquet: no column 'nope' for the splits; give split_column one of "
                                           r"filepath, sentences, cocoid"):
        list(dataset_rows(parquet, split="nope"))


def test_a_null_or_empty_caption_and_a_missing_id_name_their_row(tmp_path):
    rows = flickr_rows(3)
    rows["caption"][2] = None
    with pytest.raises(VLToolsError, match=r"nullcap: row 2, column 'caption': no caption \(null\); fix or drop "
                                           r"that row$"):
        list(dataset_rows(flickr(tmp_path / "nullcap", rows)))
    rows = flickr_rows(3)
    rows["caption"][1][3] = "  "
    with pytest.raises(VLToolsError, match=r"blank: row 1, column 'caption': an empty caption"):
        list(dataset_rows(flickr(tmp_path / "blank", rows)))
    rows = flickr_rows(3)
    rows["filename"][1] = None
    with pytest.raises(VLToolsError, match=r"noid: row 1, column 'filename': no image id"):
        list(dataset_rows(flickr(tmp_path / "noid", rows)))


def test_an_image_value_without_bytes_is_its_path_and_one_without_either_a_value_error(tmp_path):
    image = pyarrow.struct([("bytes", pyarrow.binary()), ("path", pyarrow.string())])
    table = pyarrow.table({"image": pyarrow.array([{"bytes": None, "path": "a/x.png"}, {"bytes": None, "path": None},
                                                   {"bytes": b"", "path": "/abs/y.jpg"}], image),
                           "caption": ["one", "two", "three"]})
    pyarrow.parquet.write_table(table, tmp_path / "paths.parquet")
    rows = list(dataset_rows(tmp_path / "paths.parquet", image_root=tmp_path / "root"))
    assert [row.image_id for row in rows] == ["0", "1", "2"] and rows[0].captions == ("one",)
    assert image_source(rows[0].image) == tmp_path / "root" / "a" / "x.png"
    assert str(image_source(rows[2].image)) == "/abs/y.jpg"
    with pytest.raises(ValueError, match="no image in this row"):
        image_source(rows[1].image)


def test_not_a_dataset_folder_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(VLToolsError, match=r"empty: neither a save_to_disk folder .* nor parquet files"):
        dataset_parts(tmp_path / "empty")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(VLToolsError, match=r"bad.parquet: not a readable parquet file"):
        list(dataset_rows(tmp_path / "bad.parquet"))


def test_without_the_datasets_package_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    parquet = coco_karpathy(tmp_path / "coco.parquet", tmp_path / "coco")
    hf._opened_parquet.cache_clear()
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(VLToolsError, match=r"^reading Hugging Face datasets needs the datasets package: pip install "
                                           r"'vltools\[hf\]'$"):
        list(dataset_rows(parquet))
