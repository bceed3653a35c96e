"""Data given in memory (records, features, embeddings) becomes temporary files of its kind for the readers of
files, gone when the block ends, and an error about such a file names the argument (and the record)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import vltools.io.spooled as spooled_module
from vltools.errors import ArgumentError, VLToolsError
from vltools.io.embeddings import read_embeddings
from vltools.io.features import FeaturesReader
from vltools.io.held import Embeddings, FeaturesInMemory
from vltools.io.records import read_records
from vltools.io.spooled import spooled

RECORDS = [{"image_id": "1", "caption": "a dog"}, {"image_id": 2, "caption": "två katter"}]


def test_paths_pass_through_and_records_are_written_as_their_file_until_the_block_ends():
    with spooled({"predictions": RECORDS, "refs": "refs.jsonl", "coco": {"annotations": RECORDS}}) as files:
        assert files["refs"] == "refs.jsonl"
        predictions, coco = Path(files["predictions"]), Path(files["coco"])
        assert predictions.name == "predictions.jsonl" and coco.name == "coco.json"
        assert [json.loads(line) for line in predictions.read_text(encoding="utf-8").splitlines()] == RECORDS
        assert json.loads(coco.read_text(encoding="utf-8")) == {"annotations": RECORDS}
    assert not predictions.exists() and not predictions.parent.exists()
    with spooled({"refs": "refs.jsonl"}) as files:
        assert files == {"refs": "refs.jsonl"}


def test_an_error_about_a_written_file_names_the_argument_and_the_record():
    with pytest.raises(VLToolsError) as error, spooled({"refs": RECORDS, "other": "o.jsonl"}) as files:
        raise VLToolsError(f"{files['refs']}: line 2: no 'caption' field; see {files['refs']} and o.jsonl")
    assert str(error.value) == "refs[1]: no 'caption' field; see refs (in memory) and o.jsonl"


def test_a_value_json_cannot_hold_is_the_argument_s_error():
    with pytest.raises(ArgumentError) as error, spooled({"refs": [RECORDS[0], {"image_id": {1, 2}}]}):
        pass
    assert str(error.value) == ("refs [1] cannot be written as JSON (Object of type set is not JSON serializable); "
                                "give plain str, int, float, list and dict values")


def test_features_are_written_as_a_features_file_keeping_every_value():
    rng = np.random.default_rng(0)
    regions = rng.normal(size=(3, 4, 5)).astype(np.float32)
    half = regions.astype(np.float16)
    for given in (regions, half, regions.tolist()):
        with spooled({"first": {"ids": ["a", "b", "c"], "regions": given, "num_regions": [4, 2, 3]}}) as files:
            assert Path(files["first"]).name == "first.h5"
            with FeaturesReader(files["first"]) as reader:
                assert reader.ids == ["a", "b", "c"]
                stored = reader.read(["c", "a"], ["regions", "num_regions"])
        np.testing.assert_array_equal(stored["regions"], np.asarray(given, dtype=np.float32)[[2, 0]])
        assert stored["regions"].dtype == (np.float16 if given is half else np.float32)
        assert stored["num_regions"].tolist() == [3, 4]


@pytest.mark.parametrize(("value", "message"), [
    ({"ids": ["a", "b"], "regions": np.zeros((3, 2, 2))},
     "first ['regions'] has 3 rows for 2 ids; give one row per id"),
    ({"ids": ["a", 2], "regions": np.zeros((2, 2, 2))}, "first ['ids'] must be a list of id strings, not ['a', 2]"),
    ({"ids": ["a"], "regions": [["x"]]}, "first ['regions'] must be a numeric array with one row per id, not [['x']]"),
    ({"ids": ["a"], "region": np.zeros((1, 2, 2))}, "first holds 'region', not a features dataset; give 'ids' and "
                                                    "arrays among regions, boxes, "),
    (Embeddings(["a", "b"], np.zeros((3, 2)), "images"), "first has 3 rows for 2 ids; give one row per id"),
    (Embeddings(["a"], np.zeros(2), "images"),
     "first .vectors must be a 2-d array (one row per id), not of shape (2,)"),
    # once matched as they came: one row ranked under 'a' twice, the other gone
    (Embeddings(["a", "b", "a"], np.eye(3), "images"),
     "first .ids: duplicate id 'a' (rows 0 and 2); ids must be unique"),
    ({"ids": ["a", "a"], "regions": np.zeros((2, 2, 2))},
     "first ['ids']: duplicate id 'a' (rows 0 and 1); ids must be unique"),
    # once NotImplementedError "Cannot copy out of meta tensor", from the conversion before the check
    ({"ids": ["a"], "regions": torch.zeros((1, 2, 2), device="meta")},
     "first ['regions'] is a tensor on the meta device, which holds no values; give one on the CPU or a GPU"),
    (Embeddings(["a"], torch.zeros((1, 2), device="meta"), "images"), "first .vectors is a tensor on the meta device"),
    # ids in memory get the id rule of ids in files: a NUL was h5py's "VLEN strings do not support embedded NULLs",
    # a newline or a terminal's escape was written into files that inspect, index and search read back
    ({"ids": ["a", "b\0c"], "regions": np.zeros((2, 2, 2))},
     "first ['ids'][1] 'b\\x00c' holds the control character '\\x00', which an id cannot; ids name files and lines: "
     "remove it"),
    (Embeddings(["a\nb"], np.eye(1), "images"), "first .ids[0] 'a\\nb' holds the control character '\\n', "),
    (Embeddings(["\x1b]0;title\x07"], np.eye(1), "images"), "first .ids[0] '\\x1b]0;title\\x07' holds the control "),
    ({"ids": ["cat\u202egpj.exe"], "regions": np.zeros((1, 2, 2))},
     "first ['ids'][0] 'cat\\u202egpj.exe' holds the bidirectional control U+202E, which an id cannot"),
    (Embeddings(["c0", "c1"], np.eye(2), "captions", ["i0", "i\t1"]), "first .caption_image_ids[1] 'i\\t1' holds "),
    # attributes h5py cannot store were its TypeError (or ValueError) with the file half written
    (Embeddings(["a"], np.eye(1), "images", attrs=[("model", "vse")]),
     "first .attrs must be a dict of the file's attributes, not [('model', 'vse')]"),
    (Embeddings(["a"], np.eye(1), "images", attrs={"model": None}),
     "first .attrs['model'] must be a string without NUL, a number, a bool, or a list or dict of them, as a file's "
     "attribute is, not None"),
    (Embeddings(["a"], np.eye(1), "images", attrs={"model": object()}), "first .attrs['model'] must be a string "),
    (Embeddings(["a"], np.eye(1), "images", attrs={"count": 10**30}), "first .attrs['count'] must be a string "),
    (Embeddings(["a"], np.eye(1), "images", attrs={"model": "v\0se"}), "first .attrs['model'] must be a string "),
    (Embeddings(["a"], np.eye(1), "images", attrs={"": 1}), "first .attrs has the key ''; an attribute's name is a "),
    (Embeddings(["a"], np.eye(1), None), "first .side must be 'images' or 'captions', not None"),
])
@pytest.mark.parametrize("features_in_memory", [False, True])
def test_arrays_that_cannot_be_their_file_are_refused_naming_the_argument(value, message, features_in_memory):
    with pytest.raises(ArgumentError) as error, spooled({"first": value}, features_in_memory):
        pass
    assert str(error.value).startswith(message)


@pytest.mark.parametrize("features_in_memory", [False, True])
def test_a_non_finite_row_given_in_memory_is_refused_as_given_naming_the_argument(features_in_memory):
    """Not "the model gave NaN ...; check the weights and the image", the words of a file extract-regions writes:
    the caller gave these values (issue 48 item 9)."""
    regions = np.zeros((2, 2, 3), dtype=np.float32)
    regions[1, 0, 2] = np.inf
    with pytest.raises(ArgumentError) as error, spooled({"first": {"ids": ["a", "b"], "regions": regions}},
                                                        features_in_memory):
        pass
    assert str(error.value) == "first ['regions']: image id 'b' holds NaN or infinite values; give finite numbers"


def test_a_non_finite_embedding_given_in_memory_is_refused_as_given_naming_the_argument():
    vectors = np.ones((2, 3), dtype=np.float32)
    vectors[0, 1] = np.nan
    with pytest.raises(ArgumentError) as error, spooled({"second": Embeddings(["a", "b"], vectors, "captions")}):
        pass
    assert str(error.value) == "second .vectors: caption id 'a' holds NaN or infinite values; give finite numbers"


def test_features_in_memory_are_read_as_their_file_without_one_and_records_still_get_theirs(monkeypatch):
    rng = np.random.default_rng(2)
    regions = rng.normal(size=(3, 4, 5)).astype(np.float32)
    given = {"ids": ["a", "b", "c"], "regions": regions, "num_regions": np.array([4, 2, 3])}
    with spooled({"first": given}) as files, FeaturesReader(files["first"]) as reader:
        from_file = reader.read(["c", "a", "c"])
    monkeypatch.setattr(spooled_module, "FeaturesWriter", None)    # nothing may write features now
    with spooled({"first": given, "second": RECORDS}, features_in_memory=True) as files:
        assert isinstance(files["first"], FeaturesInMemory) and str(files["first"]) == "first (in memory)"
        assert files["first"]["regions"] is regions                 # float32 already: not copied
        assert Path(files["second"]).name == "second.jsonl"
        with FeaturesReader(files["first"]) as reader:
            assert reader.ids == ["a", "b", "c"] and reader.attrs["source"] == "first (in memory)"
            from_memory = reader.read(["c", "a", "c"])
    for name in ("regions", "num_regions"):
        np.testing.assert_array_equal(from_memory[name], from_file[name])
        assert from_memory[name].dtype == from_file[name].dtype
    half = spooled({"first": {"ids": ["a"], "regions": regions[:1].astype(np.float16)}}, features_in_memory=True)
    with half as files:
        assert files["first"]["regions"].dtype == np.float16 and files["first"].attrs["dtype"] == "float16"


def test_embeddings_are_written_as_the_file_they_were_read_from(tmp_path):
    vectors = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    given = Embeddings(["c0", "c1", "c2"], vectors, "captions", ["i0", "i0", "i1"], {"model": "vse",
                                                                                     "checkpoint_digest": "d1"})
    with spooled({"second": given}) as files:
        back = read_embeddings(files["second"])
    np.testing.assert_array_equal(back.vectors, vectors)
    assert (back.ids, back.side, back.caption_image_ids) == (given.ids, "captions", given.caption_image_ids)
    assert (back.attrs["model"], back.attrs["checkpoint_digest"]) == ("vse", "d1")


def test_every_line_an_error_names_is_the_argument_s_record():
    """'second[8]: duplicate caption_id 'c7' (first on line 8)' named the first at second[7] by its line."""
    records = [{"image_id": "a", "caption": "x", "caption_id": f"c{i}"} for i in range(8)]
    with pytest.raises(VLToolsError, match=r"^second\[8\]: duplicate caption_id 'c7' \(first at second\[7\]\); ids"):
        with spooled({"second": [*records, records[7]]}) as given:
            read_records(given["second"], "captions")


@pytest.mark.parametrize("features_in_memory", [False, True])
def test_a_numpy_array_of_str_ids_is_taken_as_a_list(features_in_memory):
    regions = np.zeros((2, 1, 2), dtype=np.float32)
    with spooled({"first": {"ids": np.array(["a", "b"]), "regions": regions}}, features_in_memory) as files, \
            FeaturesReader(files["first"]) as reader:
        assert reader.ids == ["a", "b"] and all(type(item) is str for item in reader.ids)
    given = Embeddings(np.array(["c0", "c1"]), np.eye(2), "captions", np.array(["i0", "i0"], dtype=object),
                       {"model": "vse", "dims": np.array([2, 2]), "flag": np.bool_(True), "norm": np.float32(1)})
    with spooled({"second": given}) as files:
        back = read_embeddings(files["second"])
    assert (back.ids, back.caption_image_ids, back.attrs["dims"]) == (["c0", "c1"], ["i0", "i0"], [2, 2])
