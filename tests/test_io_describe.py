import json

import numpy as np
import pytest
import torch

from vltools.errors import VLToolsError
from vltools.io.checkpoints import save_checkpoint
from vltools.io.describe import describe
from vltools.io.features import FeaturesWriter
from vltools.io.hdf5 import write_arrays
from vltools.io.records import write_records


def test_features(tmp_path):
    with FeaturesWriter(tmp_path / "f.h5", {"backbone": "resnet18"}) as writer:
        writer.add(["a", "b"], regions=np.zeros((2, 4, 8)), boxes=np.zeros((2, 4, 4)))
    summary = describe(tmp_path / "f.h5")
    assert summary["kind"] == "features" and summary["count"] == 2
    assert summary["shapes"]["regions"] == [2, 4, 8]
    assert summary["attributes"]["backbone"] == "resnet18"


def test_a_folder_of_parts_is_described_as_one_file_once_its_parts_agree(tmp_path):
    (tmp_path / "set").mkdir()
    for part, (ids, span) in enumerate([(["a", "b"], "0:2/3"), (["c"], "2:3/3")]):
        with FeaturesWriter(tmp_path / "set" / f"part-0000{part}-of-00002.h5",
                            {"backbone": "resnet18", "part": f"{part}/2", "span": span}) as writer:
            writer.add(ids, regions=np.zeros((len(ids), 4, 8)))
    summary = describe(tmp_path / "set")
    assert summary["kind"] == "features" and summary["count"] == 3 and summary["parts"] == 2
    assert summary["shapes"]["regions"] == [3, 4, 8] and "part" not in summary["attributes"]
    with FeaturesWriter(tmp_path / "set" / "part-00001-of-00002.h5",
                        {"backbone": "resnet18", "part": "1/2", "span": "1:3/3"}) as writer:
        writer.add(["c"], regions=np.zeros((1, 4, 8)))
    with pytest.raises(VLToolsError, match="holds inputs 1:3 of 3, but the parts before it end at input 2"):
        describe(tmp_path / "set")


def test_sims_without_required_dataset_is_invalid(tmp_path):
    write_arrays(tmp_path / "s.h5", "sims", {"sims": np.zeros((2, 3)), "image_ids": ["a", "b"]})
    with pytest.raises(VLToolsError, match="lacks the /caption_ids dataset"):
        describe(tmp_path / "s.h5")


def test_checkpoint(tmp_path):
    save_checkpoint(tmp_path / "m.pt", "vse", {"embed_size": 4}, torch.nn.Linear(3, 4).state_dict(),
                    vocab=["<pad>", "<start>", "<end>", "<unk>"], schema=1)
    summary = describe(tmp_path / "m.pt")
    assert summary["kind"] == "checkpoint" and summary["model"] == "vse"
    assert summary["parameters"] == 3 * 4 + 4 and summary["vocab_size"] == 4
    assert summary["tokenizer"] is None
    save_checkpoint(tmp_path / "t.pt", "vse", {}, {}, train_state={"inputs": {"tokenizer": "rule+treebank"}}, schema=1)
    assert describe(tmp_path / "t.pt")["tokenizer"] == "rule+treebank"


def test_jsonl_kinds_and_splits(tmp_path):
    records = [{"image_id": str(i // 2), "caption": "x", "split": "train" if i < 4 else "test"} for i in range(6)]
    write_records(tmp_path / "c.jsonl", records)
    summary = describe(tmp_path / "c.jsonl")
    assert summary == {"path": str(tmp_path / "c.jsonl"), "kind": "captions", "count": 6, "distinct_image_id": 3,
                       "splits": {"test": 2, "train": 4}}


def test_unknown_jsonl_and_empty_files(tmp_path):
    (tmp_path / "x.jsonl").write_text(json.dumps({"foo": 1}) + "\n")
    with pytest.raises(VLToolsError, match="line 1: not a record of any vltools JSONL kind"):
        describe(tmp_path / "x.jsonl")
    (tmp_path / "e.jsonl").write_text("")
    with pytest.raises(VLToolsError, match="empty file"):
        describe(tmp_path / "e.jsonl")
