import re

import h5py
import numpy as np
import pytest

from vltools.errors import VLToolsError
from vltools.io.describe import describe
from vltools.io.features import FeaturesReader, FeaturesWriter, stored_features
from vltools.io.held import FeaturesInMemory


def write_example(path, n=7, k=3, d=5, dtype="float32"):
    rng = np.random.default_rng(0)
    regions = rng.normal(size=(n, k, d)).astype(np.float32)
    boxes = rng.uniform(0, 50, size=(n, k, 4)).astype(np.float32)
    ids = [f"img{i}" for i in range(n)]
    with FeaturesWriter(path, {"backbone": "test"}, dtype=dtype) as writer:
        writer.add(ids[:4], regions=regions[:4], boxes=boxes[:4])
        writer.add(ids[4:], regions=regions[4:], boxes=boxes[4:])
    return ids, regions, boxes


def test_rows_come_back_in_the_order_asked(tmp_path):
    ids, regions, boxes = write_example(tmp_path / "f.h5")
    with FeaturesReader(tmp_path / "f.h5") as reader:
        assert reader.ids == ids
        asked = ["img5", "img0", "img5", "img3"]
        got = reader.read(asked)
        expected_rows = [5, 0, 5, 3]
        np.testing.assert_array_equal(got["regions"], regions[expected_rows])
        np.testing.assert_array_equal(got["boxes"], boxes[expected_rows])


@pytest.mark.parametrize("asked", [["img2", "img3", "img4"], ["img0"], ["img3", "img2"], ["img2", "img4"],
                                   ["img2", "img2"], []])
def test_runs_of_consecutive_rows_and_any_other_order_read_the_same_rows(tmp_path, asked):
    _, regions, boxes = write_example(tmp_path / "f.h5")
    rows = [int(name.removeprefix("img")) for name in asked]
    with FeaturesReader(tmp_path / "f.h5") as file, FeaturesReader(held_example()) as memory:
        for reader in (file, memory):
            got = reader.read(asked)
            np.testing.assert_array_equal(got["regions"], regions[rows])
            np.testing.assert_array_equal(got["boxes"], boxes[rows])
            assert got["regions"].shape == (len(rows), 3, 5)


def test_a_run_of_features_held_in_memory_is_a_copy_not_a_view_of_the_callers_array():
    held = held_example()
    with FeaturesReader(held) as reader:
        got = reader.read(["img1", "img2"])["regions"]
        got[:] = 0
    assert np.abs(held["regions"][1:3]).sum() > 0


def test_float16_storage_and_chunking_by_image(tmp_path):
    _, regions, _ = write_example(tmp_path / "f.h5", dtype="float16")
    with h5py.File(tmp_path / "f.h5") as handle:
        assert handle["regions"].dtype == np.float16
        assert handle["regions"].chunks == (1, 3, 5)
        assert handle.attrs["format"] == "vltools.features"
        assert handle.attrs["backbone"] == "test"
        for key in ("vltools_version", "command", "created"):
            assert key in handle.attrs
    with FeaturesReader(tmp_path / "f.h5") as reader:
        np.testing.assert_allclose(reader.read(["img2"])["regions"][0], regions[2], atol=2e-3)


def test_iter_batches_covers_every_row_once(tmp_path):
    ids, regions, _ = write_example(tmp_path / "f.h5")
    seen = []
    with FeaturesReader(tmp_path / "f.h5") as reader:
        for batch_ids, arrays in reader.iter_batches(3, fields=["regions"]):
            seen.extend(batch_ids)
            np.testing.assert_array_equal(arrays["regions"], regions[[ids.index(i) for i in batch_ids]])
    assert seen == ids


def test_unknown_id_is_named(tmp_path):
    write_example(tmp_path / "f.h5")
    with FeaturesReader(tmp_path / "f.h5") as reader, pytest.raises(VLToolsError, match="'nope'"):
        reader.read(["img1", "nope"])


def test_duplicate_ids_refused_by_writer(tmp_path):
    with FeaturesWriter(tmp_path / "f.h5", {}) as writer:
        writer.add(["a"], regions=np.zeros((1, 2, 2)))
        with pytest.raises(VLToolsError, match="duplicate image id 'a'"):
            writer.add(["a"], regions=np.zeros((1, 2, 2)))


def test_rows_missing_from_a_dataset_is_an_error(tmp_path):
    path = tmp_path / "f.h5"
    write_example(path)
    with h5py.File(path, "a") as handle:
        handle["regions"].resize(3, axis=0)
    with pytest.raises(VLToolsError, match="incomplete"):
        FeaturesReader(path)


def test_other_kind_and_non_hdf5_files_are_refused(tmp_path):
    other = tmp_path / "sims.h5"
    with h5py.File(other, "w") as handle:
        handle.attrs["format"] = "vltools.sims"
    with pytest.raises(VLToolsError, match="expected a vltools features file, found sims"):
        FeaturesReader(other)
    text = tmp_path / "text.h5"
    text.write_text("not hdf5")
    with pytest.raises(VLToolsError, match="not a readable HDF5 file"):
        FeaturesReader(text)


def test_failed_images_are_recorded_and_read_back(tmp_path):
    with FeaturesWriter(tmp_path / "f.h5", {}) as writer:
        writer.add(["a"], regions=np.zeros((1, 2, 2)))
        writer.set_failed(["b.jpg\tempty file"])
    with FeaturesReader(tmp_path / "f.h5") as reader:
        assert reader.failed == ["b.jpg\tempty file"]
        assert reader.attrs["num_failed"] == 1
    write_example(tmp_path / "g.h5")
    assert FeaturesReader(tmp_path / "g.h5").failed == []


def test_flipped_bytes_and_non_finite_rows_are_reported_not_propagated(tmp_path):
    ids, regions, _ = write_example(tmp_path / "f.h5")
    with h5py.File(tmp_path / "f.h5", "r") as handle:
        assert handle["regions"].fletcher32 and handle["boxes"].fletcher32
        offset = handle["regions"].id.get_chunk_info(5).byte_offset  # the chunk of row 5 (img5)
    data = bytearray((tmp_path / "f.h5").read_bytes())
    for position in range(offset, offset + 20):
        data[position] ^= 0xFF
    (tmp_path / "flipped.h5").write_bytes(bytes(data))
    with FeaturesReader(tmp_path / "flipped.h5") as reader:
        np.testing.assert_array_equal(reader.read(["img1"])["regions"][0], regions[1])  # other rows still read
        with pytest.raises(VLToolsError, match=r"flipped.h5: /regions is damaged \(checksum"):
            reader.read(["img1", "img5"])
    with pytest.raises(VLToolsError, match=r"flipped.h5: /regions is damaged"):
        describe(tmp_path / "flipped.h5")
    with h5py.File(tmp_path / "f.h5", "a") as handle:
        handle["regions"][3, 1, 2] = np.nan
    with FeaturesReader(tmp_path / "f.h5") as reader, \
            pytest.raises(VLToolsError, match=r"f.h5: image id 'img3': /regions holds NaN"):
        reader.read(ids)
    with pytest.raises(VLToolsError, match=r"f.h5: id 'img3': /regions holds NaN"):
        describe(tmp_path / "f.h5")


def test_changed_ids_fail_their_checksum(tmp_path):
    write_example(tmp_path / "f.h5")
    with h5py.File(tmp_path / "f.h5", "a") as handle:
        handle["ids"][2] = "img9"
    with pytest.raises(VLToolsError, match="f.h5: /ids does not match its checksum"):
        FeaturesReader(tmp_path / "f.h5")


@pytest.mark.parametrize(("name", "value", "shown"), [("stride", "8x", "'8x' (str), not an integer"),
                                                       ("regions", 7, "7 (int), not a string"),
                                                       ("ids_checksum", 3.5, "3.5 (float), not a string")])
def test_an_attribute_the_readers_use_of_another_type_is_one_line_naming_it(tmp_path, name, value, shown):
    write_example(tmp_path / "f.h5")
    with h5py.File(tmp_path / "f.h5", "a") as handle:
        handle.attrs[name] = value
    with pytest.raises(VLToolsError) as caught:
        FeaturesReader(tmp_path / "f.h5")
    assert str(caught.value) == (f"{tmp_path / 'f.h5'}: attribute {name!r} is {shown}; rerun the stage that wrote "
                                 "it, or restore the file from a copy")


def test_a_row_that_would_be_stored_non_finite_is_refused_naming_its_id(tmp_path):
    large = np.full((2, 3, 4), 1e6, dtype=np.float32)      # finite, but beyond float16's largest value
    with FeaturesWriter(tmp_path / "f16.h5", {"stage": "test"}, dtype="float16") as writer:
        with pytest.raises(VLToolsError, match=r"image id 'a': /regions values exceed float16's range.*--dtype "
                                               r"float32"):
            writer.add(["a", "b"], regions=large)
    with FeaturesWriter(tmp_path / "f32.h5", {"stage": "test"}, dtype="float32") as writer:
        writer.add(["a", "b"], regions=large)
        nan = np.zeros((1, 3, 4), dtype=np.float32)
        nan[0, 1, 2] = np.nan
        with pytest.raises(VLToolsError, match=r"image id 'c': the model gave NaN or infinite /regions values"):
            writer.add(["c"], regions=nan)


@pytest.mark.parametrize("field", ["boxes", "label_scores", "attribute_scores", "mask"])
def test_nan_in_any_float_field_is_refused_as_it_is_written(tmp_path, field):
    shapes = {"boxes": (1, 2, 4), "label_scores": (1, 2), "attribute_scores": (1, 2), "mask": (1, 2)}
    values = np.full(shapes[field], np.nan, dtype=np.float32)
    with FeaturesWriter(tmp_path / "part.h5", {"stage": "test"}, dtype="float32", name="feats.h5") as writer:
        with pytest.raises(VLToolsError, match=rf"^feats.h5: image id 'a': the model gave NaN or infinite /{field} "
                                               r"values; check the weights and the image$"):
            writer.add(["a"], regions=np.zeros((1, 2, 3), np.float32), **{field: values})


def test_errors_about_rows_call_the_file_by_the_name_given(tmp_path):
    """A temporary part of an output is named as the output the user gave."""
    large = np.full((1, 3, 4), 1e6, dtype=np.float32)
    with FeaturesWriter(tmp_path / "part.h5.tmp", {"stage": "test"}, name="feats.h5") as writer:
        with pytest.raises(VLToolsError, match=r"^feats.h5: image id 'a': /regions values exceed float16's range"):
            writer.add(["a"], regions=large)
        writer.add(["b"], regions=large / 1e3)
        with pytest.raises(VLToolsError, match=r"^feats.h5: duplicate image id 'b'$"):
            writer.add(["b"], regions=large / 1e3)


def held_example(n=7, k=3, d=5, **datasets):
    """The datasets of `write_example`'s file (ids, regions, boxes, float32) held in memory, with `datasets` over
    them."""
    rng = np.random.default_rng(0)
    regions = rng.normal(size=(n, k, d)).astype(np.float32)
    boxes = rng.uniform(0, 50, size=(n, k, 4)).astype(np.float32)
    ids = np.array([f"img{i}" for i in range(n)], dtype=object)
    return FeaturesInMemory("first (in memory)", {"ids": ids, "regions": regions, "boxes": boxes, **datasets},
                            {"backbone": "test", "dtype": "float32"})


def test_features_in_memory_are_read_as_their_file(tmp_path):
    write_example(tmp_path / "f.h5")
    asked = ["img5", "img0", "img5", "img3"]
    with FeaturesReader(tmp_path / "f.h5") as file, FeaturesReader(held_example()) as memory:
        assert (memory.ids, memory.fields, memory.shape("regions"), memory.failed, len(memory)) == \
            (file.ids, file.fields, file.shape("regions"), file.failed, len(file))
        assert str(memory.path) == "first (in memory)" and memory.attrs["backbone"] == "test"
        for name in ("regions", "boxes"):
            np.testing.assert_array_equal(memory.read(asked)[name], file.read(asked)[name])
            np.testing.assert_array_equal(memory.read_range(name, 2, 5), file.read_range(name, 2, 5))
            np.testing.assert_array_equal(memory.read_rows(name, [6, 1, 6]), file.read_rows(name, [6, 1, 6]))
        assert [ids for ids, _ in memory.iter_batches(3)] == [ids for ids, _ in file.iter_batches(3)]
        with pytest.raises(VLToolsError, match=r"^first \(in memory\): image id 'nope' is not in this features"):
            memory.read(["img1", "nope"])


def test_features_in_memory_get_the_file_s_checks_named_as_their_argument():
    with pytest.raises(VLToolsError, match=r"^first \(in memory\): duplicate image id 'img1' in /ids$"):
        FeaturesReader(held_example(ids=np.array(["img0", "img1", "img1"], dtype=object), regions=np.zeros((3, 1, 2)),
                                    boxes=np.zeros((3, 1, 4))))
    with pytest.raises(VLToolsError, match=r"^first \(in memory\): /boxes has 6 rows but /ids has 7"):
        FeaturesReader(held_example(boxes=np.zeros((6, 3, 4), dtype=np.float32)))
    regions = held_example()["regions"].copy()
    regions[4, 1, 0] = np.inf
    with FeaturesReader(held_example(regions=regions)) as reader:
        reader.read(["img3"])
        with pytest.raises(VLToolsError, match=r"^first \(in memory\): image id 'img4': /regions holds NaN or "):
            reader.read(["img3", "img4"])


def test_rows_are_stored_as_the_file_stores_them_without_copying_what_is_stored_already():
    regions = np.ones((2, 3, 4), dtype=np.float32)
    stored = stored_features("x", ["a", "b"], {"regions": regions, "global": np.ones((2, 3)), "num_regions": [3, 2]},
                         np.dtype("float16"))
    assert [stored[name].dtype for name in ("regions", "global", "num_regions")] == [np.float16, np.float16, np.int32]
    assert stored_features("x", ["a", "b"], {"regions": regions}, np.dtype("float32"))["regions"] is regions
    with pytest.raises(VLToolsError, match=r"^x: image id 'b': /regions values exceed float16's range"):
        stored_features("x", ["a", "b"], {"regions": np.array([[1.0], [1e6]])}, np.dtype("float16"))
    with pytest.raises(ValueError, match="^regions has 2 rows for 3 ids$"):
        stored_features("x", ["a", "b", "c"], {"regions": regions}, np.dtype("float32"))


@pytest.mark.parametrize(("name", "value", "shown"), [
    ("regions", np.zeros((2, 5), np.float32), "/regions is float32 of shape (2, 5), not the 3-d floats "
                                              "(images x regions x dims)"),
    ("regions", np.zeros((2, 3, 5, 1), np.float32), "/regions is float32 of shape (2, 3, 5, 1), not the 3-d floats"),
    ("boxes", np.zeros((2, 3, 5), np.float32), r"/boxes is float32 of shape (2, 3, 5), not the 3-d floats "
                                               "(images x regions x 4)"),
    ("num_regions", np.ones((2, 1), np.int32), "/num_regions is int32 of shape (2, 1), not the 1-d integers (images)"),
    ("image_size", np.ones((2, 2), np.float32), "/image_size is float32 of shape (2, 2), not the 2-d integers"),
])
def test_a_dataset_of_another_rank_or_kind_is_refused_on_opening_in_a_file_and_in_memory(tmp_path, name, value,
                                                                                          shown):
    """A 1-d or 4-d /regions with its ids' checksum intact gave "not enough values to unpack" in match and encode."""
    arrays = {"regions": np.zeros((2, 3, 5), np.float32), name: value}
    path = tmp_path / "f.h5"
    with FeaturesWriter(path, {}, "float32") as writer:
        writer.add(["a", "b"], regions=arrays["regions"])
    with h5py.File(path, "a") as handle:      # as a hand-made file may hold it: the writer casts to its dtype
        if name in handle:
            del handle[name]
        handle[name] = value
    message = f"{path}: {shown}"
    with pytest.raises(VLToolsError, match=f"^{re.escape(message)}"):
        FeaturesReader(path)
    with pytest.raises(VLToolsError, match=re.escape(shown)):
        describe(path)
    held = FeaturesInMemory("first (in memory)", {"ids": np.array(["a", "b"], dtype=object), **arrays}, {})
    with pytest.raises(VLToolsError, match=f"^first \\(in memory\\): {re.escape(shown)}"):
        FeaturesReader(held)


@pytest.mark.parametrize("count", [-1, 4, 10 ** 9])
def test_a_count_of_regions_outside_the_rows_is_refused_naming_its_image(tmp_path, count):
    counts = np.array([3, count, 2], np.int32)
    path = tmp_path / "f.h5"
    with FeaturesWriter(path, {}, "float32") as writer:
        writer.add(["img0", "img1", "img2"], regions=np.ones((3, 3, 5), np.float32), num_regions=counts)
    shown = f"image id 'img1': /num_regions is {count}, outside 0..3 (the region rows of each image); rerun"
    with pytest.raises(VLToolsError, match=f"^{re.escape(f'{path}: {shown}')}"):
        FeaturesReader(path)
    with pytest.raises(VLToolsError, match=re.escape(shown)):
        describe(path)
    with pytest.raises(VLToolsError, match=f"^first \\(in memory\\): {re.escape(shown)}"):
        FeaturesReader(held_example(n=3, num_regions=counts))
    counts[1] = 0
    with FeaturesReader(held_example(n=3, num_regions=counts)) as reader:
        assert reader.read(["img1"])["num_regions"].tolist() == [0]
